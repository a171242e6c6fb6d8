package kafka

// ListGroups (key 16), versions 0-5.
//
// Version notes: v4 filters by state, v5 by type and names each group's type
// ("classic" or "consumer"); groups with committed offsets but no members are
// listed as Empty classic groups (they exist for OffsetFetch). Filters match
// case-insensitively, as Kafka's do.

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleListGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	seen := map[string]bool{}
	match := func(filter []string, v string) bool {
		if len(filter) == 0 {
			return true
		}
		for _, f := range filter {
			if strings.EqualFold(f, v) {
				return true
			}
		}
		return false
	}
	// Describe on the cluster lists every group; otherwise those the
	// principal may describe.
	everyGroup := rc.authorizedCluster(security.OpDescribe)
	want := func(group, state, typ string) bool {
		return match(req.StatesFilter, state) && match(req.TypesFilter, typ) &&
			(everyGroup || rc.allowedGroup(group, security.OpDescribe))
	}
	var listed []groups.Description
	for _, be := range rc.srv().attached() {
		listed = append(listed, be.groups.List()...)
	}
	for _, d := range listed {
		seen[d.Group] = true
		if want(d.Group, string(d.State), d.Type) {
			lg := kmsg.NewListGroupsResponseGroup()
			lg.Group = d.Group
			lg.ProtocolType = d.ProtocolType
			lg.GroupState = string(d.State)
			lg.GroupType = d.Type
			resp.Groups = append(resp.Groups, lg)
		}
	}
	for _, g := range rc.srv().offsetGroups() {
		if !seen[g] && want(g, "Empty", "classic") {
			lg := kmsg.NewListGroupsResponseGroup()
			lg.Group = g
			lg.ProtocolType = "consumer"
			lg.GroupState = "Empty"
			lg.GroupType = "classic"
			resp.Groups = append(resp.Groups, lg)
		}
	}
	return reply{resp: resp}
}
