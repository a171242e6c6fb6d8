package kafka

// ListGroups (key 16), versions 0-4.
//
// Version notes: v4 filters by state; groups with committed offsets but no
// members are listed as Empty (they exist for OffsetFetch).

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleListGroups(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListGroupsRequest)
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	seen := map[string]bool{}
	want := func(state string) bool {
		if len(req.StatesFilter) == 0 {
			return true
		}
		for _, f := range req.StatesFilter {
			if f == state {
				return true
			}
		}
		return false
	}
	for _, d := range rc.srv().groups.List() {
		seen[d.Group] = true
		if want(string(d.State)) {
			resp.Groups = append(resp.Groups, kmsg.ListGroupsResponseGroup{Group: d.Group, ProtocolType: d.ProtocolType, GroupState: string(d.State)})
		}
	}
	for _, g := range rc.srv().broker.OffsetGroups() {
		if !seen[g] && want("Empty") {
			resp.Groups = append(resp.Groups, kmsg.ListGroupsResponseGroup{Group: g, ProtocolType: "consumer", GroupState: "Empty"})
		}
	}
	return reply{resp: resp}
}
