package kafka

// DescribeClientQuotas (key 48), versions 0-1.
//
// Version notes: user quotas (entity type "user") with producer_byte_rate
// and consumer_byte_rate, the same limits `rosetta quota` sets per tenant
// and namespace (`docs/security.md`). Exact and "any" matches; default
// users, client ids and IPs have no quotas here, so they match nothing.
// Needs DescribeConfigs on the cluster.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeClientQuotas(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	q := rc.srv().opts.Quotas
	if !rc.authorizedCluster(security.OpDescribeConfigs) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return reply{resp: resp}
	}
	if q == nil {
		return reply{resp: resp}
	}
	// Which users match: every component must be about users (or, not
	// strict, other types are ignored).
	matchUser := func(string) bool { return true }
	for _, c := range req.Components {
		switch {
		case c.EntityType != "user" && req.Strict:
			return reply{resp: resp} // strict: entities must have exactly these types; ours have only "user"
		case c.EntityType != "user":
			if c.MatchType != 2 { // a specific or default client id / ip: none has quotas
				return reply{resp: resp}
			}
		case c.MatchType == 0 && c.Match != nil:
			want := *c.Match
			matchUser = func(u string) bool { return u == want }
		case c.MatchType == 1: // the default user: no quota set
			return reply{resp: resp}
		}
	}
	var users []string
	limits := q.List()
	for e := range limits {
		if e.Kind == "user" && matchUser(e.Name) {
			users = append(users, e.Name)
		}
	}
	sort.Strings(users)
	for _, u := range users {
		l := limits[quota.Entity{Kind: "user", Name: u}]
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		ent := kmsg.NewDescribeClientQuotasResponseEntryEntity()
		ent.Type, ent.Name = "user", strp(u)
		entry.Entity = []kmsg.DescribeClientQuotasResponseEntryEntity{ent}
		if l.ProduceBytesPerSecond > 0 {
			dcqrev := kmsg.NewDescribeClientQuotasResponseEntryValue()
			dcqrev.Key = quota.KafkaProducerByteRate
			dcqrev.Value = float64(l.ProduceBytesPerSecond)
			entry.Values = append(entry.Values, dcqrev)
		}
		if l.FetchBytesPerSecond > 0 {
			dcqrev := kmsg.NewDescribeClientQuotasResponseEntryValue()
			dcqrev.Key = quota.KafkaConsumerByteRate
			dcqrev.Value = float64(l.FetchBytesPerSecond)
			entry.Values = append(entry.Values, dcqrev)
		}
		if len(entry.Values) > 0 {
			resp.Entries = append(resp.Entries, entry)
		}
	}
	return reply{resp: resp}
}
