package kafka

// AlterClientQuotas (key 49), versions 0-1.
//
// Version notes: Kafka's client quota entities — user, client-id or both,
// each named or the default (a null name) — with producer_byte_rate and
// consumer_byte_rate in bytes per second, enforced on this node (users'
// across every protocol they speak; client ids for Kafka clients), resolved
// in Kafka's order of precedence (quota/clients.go). Needs AlterConfigs on
// the cluster; audited.
//
// Not implemented: ip entities and the keys request_percentage,
// controller_mutation_rate and connection_creation_rate (INVALID_REQUEST).

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleAlterClientQuotas(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AlterClientQuotasRequest)
	resp := req.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	q := rc.srv().opts.Quotas
	allowed := rc.authorizedCluster(security.OpAlterConfigs)
	for _, e := range req.Entries {
		r := kmsg.NewAlterClientQuotasResponseEntry()
		for _, en := range e.Entity {
			re := kmsg.NewAlterClientQuotasResponseEntryEntity()
			re.Type, re.Name = en.Type, en.Name
			r.Entity = append(r.Entity, re)
		}
		err := func() error {
			switch {
			case !allowed:
				return &kafkaCodeError{code: kerr.ClusterAuthorizationFailed.Code, msg: "not authorized to alter quotas"}
			case q == nil:
				return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "quotas are not available"}
			}
			ent, err := quotaEntity(e.Entity)
			if err != nil {
				return err
			}
			l := q.List()[ent]
			for _, op := range e.Ops {
				v := int64(op.Value)
				if op.Remove {
					v = 0
				}
				if v < 0 {
					return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: fmt.Sprintf("%s must not be negative", op.Key)}
				}
				switch op.Key {
				case quota.KafkaProducerByteRate:
					l.ProduceBytesPerSecond = v
				case quota.KafkaConsumerByteRate:
					l.FetchBytesPerSecond = v
				default:
					return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "unsupported quota " + op.Key}
				}
			}
			if req.ValidateOnly {
				return nil
			}
			return q.Set(rc.ctx(), rc.conn.auth.principal.String(), ent, l)
		}()
		r.ErrorCode, r.ErrorMessage = errorCode(err), errorMessage(err)
		resp.Entries = append(resp.Entries, r)
	}
	return reply{resp: resp}
}

// quotaEntity reads a Kafka quota entity: user, client-id or both, a null
// name meaning the default.
func quotaEntity(comps []kmsg.AlterClientQuotasRequestEntryEntity) (quota.Entity, error) {
	var user, client *string
	var hasUser, hasClient bool
	name := func(n *string) (*string, error) {
		switch {
		case n == nil:
			d := quota.Default
			return &d, nil
		case *n == "" || *n == quota.Default:
			return nil, &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: fmt.Sprintf("invalid quota entity name %q", *n)}
		}
		return n, nil
	}
	for _, c := range comps {
		var err error
		switch {
		case c.Type == "user" && !hasUser:
			hasUser = true
			user, err = name(c.Name)
		case c.Type == "client-id" && !hasClient:
			hasClient = true
			client, err = name(c.Name)
		default:
			return quota.Entity{}, &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: fmt.Sprintf("unsupported or repeated quota entity type %q (user and client-id are supported)", c.Type)}
		}
		if err != nil {
			return quota.Entity{}, err
		}
	}
	switch {
	case hasUser && hasClient:
		return quota.Entity{Kind: quota.KindUserClientID, Name: *user, ClientID: *client}, nil
	case hasUser:
		return quota.Entity{Kind: quota.KindUser, Name: *user}, nil
	case hasClient:
		return quota.Entity{Kind: quota.KindClientID, Name: *client}, nil
	}
	return quota.Entity{}, &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "empty quota entity"}
}
