package kafka

// AlterClientQuotas (key 49), versions 0-1.
//
// Version notes: user entities only, keys producer_byte_rate and
// consumer_byte_rate (bytes per second, enforced on this node across
// every protocol the user speaks); other entity types (client-id, ip, the
// default user) and keys (request_percentage, controller_mutation_rate,
// connection_creation_rate) are INVALID_REQUEST. Needs AlterConfigs on the
// cluster; audited.

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
			acqree := kmsg.NewAlterClientQuotasResponseEntryEntity()
			acqree.Type = en.Type
			acqree.Name = en.Name
			r.Entity = append(r.Entity, acqree)
		}
		err := func() error {
			switch {
			case !allowed:
				return &kafkaCodeError{code: kerr.ClusterAuthorizationFailed.Code, msg: "not authorized to alter quotas"}
			case q == nil:
				return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "quotas are not available"}
			case len(e.Entity) != 1 || e.Entity[0].Type != "user" || e.Entity[0].Name == nil || *e.Entity[0].Name == "":
				return &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "only quotas of a named user are supported"}
			}
			ent := quota.Entity{Kind: "user", Name: *e.Entity[0].Name}
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
