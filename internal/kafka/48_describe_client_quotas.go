package kafka

// DescribeClientQuotas (key 48), versions 0-1.
//
// Version notes: Kafka's client quota entities — user, client-id and both
// together, each named or the default — with producer_byte_rate and
// consumer_byte_rate (quota.Entity; `rosetta quota` shows the same).
// Filters match exactly, the default, or any specified name; strict
// filters also refuse entities with other types. Needs DescribeConfigs on
// the cluster.
//
// Not implemented: ip entities (none exist, so they match nothing).

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
	limits := q.List()
	var found []quota.Entity
	for e := range limits {
		if comps, ok := kafkaQuotaComponents(e); ok && quotaFilterMatches(req, comps) {
			found = append(found, e)
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].String() < found[j].String() })
	for _, e := range found {
		l := limits[e]
		entry := kmsg.NewDescribeClientQuotasResponseEntry()
		comps, _ := kafkaQuotaComponents(e)
		for _, c := range comps {
			ent := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ent.Type, ent.Name = c.typ, c.name
			entry.Entity = append(entry.Entity, ent)
		}
		for _, v := range []struct {
			key  string
			rate int64
		}{{quota.KafkaProducerByteRate, l.ProduceBytesPerSecond}, {quota.KafkaConsumerByteRate, l.FetchBytesPerSecond}} {
			if v.rate > 0 {
				val := kmsg.NewDescribeClientQuotasResponseEntryValue()
				val.Key, val.Value = v.key, float64(v.rate)
				entry.Values = append(entry.Values, val)
			}
		}
		if len(entry.Values) > 0 {
			resp.Entries = append(resp.Entries, entry)
		}
	}
	return reply{resp: resp}
}

// quotaComponent is one (type, name) of a Kafka quota entity; a nil name
// is the default.
type quotaComponent struct {
	typ  string
	name *string
}

// kafkaQuotaComponents returns the Kafka view of a quota entity (false for
// tenants and namespaces).
func kafkaQuotaComponents(e quota.Entity) ([]quotaComponent, bool) {
	name := func(n string) *string {
		if n == quota.Default {
			return nil
		}
		return strp(n)
	}
	switch e.Kind {
	case quota.KindUser:
		return []quotaComponent{{"user", name(e.Name)}}, true
	case quota.KindClientID:
		return []quotaComponent{{"client-id", name(e.Name)}}, true
	case quota.KindUserClientID:
		return []quotaComponent{{"user", name(e.Name)}, {"client-id", name(e.ClientID)}}, true
	}
	return nil, false
}

// quotaFilterMatches applies a DescribeClientQuotas filter to an entity.
func quotaFilterMatches(req *kmsg.DescribeClientQuotasRequest, comps []quotaComponent) bool {
	named := map[string]bool{}
	for _, f := range req.Components {
		named[f.EntityType] = true
		var c *quotaComponent
		for i := range comps {
			if comps[i].typ == f.EntityType {
				c = &comps[i]
			}
		}
		if c == nil {
			return false
		}
		switch f.MatchType {
		case 0: // exactly this name
			if f.Match == nil || c.name == nil || *c.name != *f.Match {
				return false
			}
		case 1: // the default
			if c.name != nil {
				return false
			}
		case 2: // any specified name
			if c.name == nil {
				return false
			}
		default:
			return false
		}
	}
	if req.Strict {
		for _, c := range comps {
			if !named[c.typ] {
				return false
			}
		}
	}
	return true
}
