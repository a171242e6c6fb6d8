package remoting

// Authentication and authorization of remoting requests, as RocketMQ's
// ACL does it: every request carries AccessKey and Signature ext fields,
// Signature = Base64(HmacSHA1(secret, values of every other ext field in
// key order, then the body)); the request's resources (topic, group) are
// read from its header or body per request code and checked against the
// shared ACL store (Pub → Write, Sub → Read, admin codes → Create, Delete,
// Describe …).
//
// The Go client (rocketmq-client-go) puts SecurityToken on the wire but
// leaves it out of what it signs, where the Java client signs it; both
// signatures are accepted, and the token itself grants nothing. An access
// key that is a JWT (security.jwt_*) authenticates as the token's subject
// without a signature, as RocketMQ-on-Pulsar accepted tokens.

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// Ext field names of the ACL signature.
const (
	extAccessKey     = "AccessKey"
	extSignature     = "Signature"
	extSecurityToken = "SecurityToken"
	extUniqueKeyFlag = "_UNIQUE_KEY_QUERY"
)

// authCheck is one resource a request touches.
type authCheck struct {
	rt   security.ResourceType
	name string
	op   security.Operation
}

// authorizeRequest authenticates a request (when authentication or
// authorization is on) and checks its resources; it returns the refusal
// to send, or nil.
func (c *conn) authorizeRequest(req *protocol.Command) (security.Principal, *protocol.Command) {
	sec := c.s.opts.Security
	if sec == nil || (!c.s.opts.Authentication && !sec.AuthorizationEnabled()) {
		return security.Anonymous, nil
	}
	p, err := c.authenticate(sec, req)
	if err != nil {
		if g := c.s.opts.Guard; g != nil {
			g.Failed(c.host())
		}
		c.log.Warn("remoting authentication failed", "code", req.Code, "access_key", req.Ext(extAccessKey), "err", err)
		return p, protocol.NewResponse(req, protocol.NoPermission, err.Error())
	}
	if !sec.AuthorizationEnabled() {
		return p, nil
	}
	for _, ch := range requestChecks(req) {
		if resp := c.check(p, req, ch); resp != nil {
			return p, resp
		}
	}
	return p, nil
}

// check answers NO_PERMISSION when p may not do ch (nil when allowed or
// authorization is off).
func (c *conn) check(p security.Principal, req *protocol.Command, ch authCheck) *protocol.Command {
	sec := c.s.opts.Security
	if sec == nil || sec.Authorize(p, c.host(), ch.rt, ch.name, ch.op) {
		return nil
	}
	c.log.Info("remoting request not authorized", "principal", p.String(), "code", req.Code, "resource", ch.rt, "name", ch.name, "operation", ch.op)
	return protocol.NewResponse(req, protocol.NoPermission,
		"no permission: "+p.String()+" may not "+ch.op.String()+" "+ch.rt.String()+" "+ch.name)
}

// host is the client's IP, for ACL host checks.
func (c *conn) host() string {
	if i := strings.LastIndexByte(c.remote, ':'); i > 0 {
		return strings.Trim(c.remote[:i], "[]")
	}
	return c.remote
}

// authenticate returns the principal a request proves, Anonymous when it
// carries no credentials and authentication is not required.
func (c *conn) authenticate(sec *security.Service, req *protocol.Command) (security.Principal, error) {
	ak, sig := req.Ext(extAccessKey), req.Ext(extSignature)
	if ak == "" {
		if c.s.opts.Authentication {
			return security.Principal{}, errAuth("no AccessKey: the client must be given credentials")
		}
		return security.Anonymous, nil
	}
	if security.LooksLikeJWT(ak) {
		p, _, err := sec.VerifyToken(ak)
		return p, err
	}
	secret, ok := sec.SigningSecret(ak)
	if !ok || sig == "" {
		return security.Principal{}, errAuth("unknown access key or missing signature")
	}
	want, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		return security.Principal{}, errAuth("malformed signature")
	}
	for _, skip := range [][]string{{extSignature}, {extSignature, extSecurityToken}, {extSignature, extUniqueKeyFlag}} {
		if hmac.Equal(signRemoting(req, secret, skip), want) {
			return security.User(ak), nil
		}
	}
	return security.Principal{}, errAuth("signature does not match (wrong secret key?)")
}

func errAuth(msg string) error { return &authError{msg: msg} }

// authError is a failed authentication, mapped to NO_PERMISSION.
type authError struct{ msg string }

func (e *authError) Error() string { return "authentication failed: " + e.msg }

// signRemoting computes RocketMQ's request signature, leaving out the
// named ext fields.
func signRemoting(req *protocol.Command, secret []byte, skip []string) []byte {
	fields := make([]protocol.Field, 0, len(req.ExtFields))
	for _, f := range req.ExtFields {
		if !slices.Contains(skip, f.Key) {
			fields = append(fields, f)
		}
	}
	sort.Slice(fields, func(i, j int) bool { return fields[i].Key < fields[j].Key })
	m := hmac.New(sha1.New, secret)
	for _, f := range fields {
		m.Write([]byte(f.Value))
	}
	m.Write(req.Body)
	return m.Sum(nil)
}

// aclTopic is the name ACLs know a RocketMQ topic by ("ns%orders" is the
// namespace ns: ns/orders, as Kafka clients name it).
func aclTopic(name string) string {
	if n, err := topicName(name); err == nil {
		return n.Short()
	}
	return name
}

// topicCheck checks a topic, or for a retry or dead-letter topic, its
// group (RocketMQ's rule: %RETRY%g and %DLQ%g belong to group g).
func topicCheck(topic string, op security.Operation) authCheck {
	for _, prefix := range []string{"%RETRY%", "%DLQ%"} {
		if g, ok := strings.CutPrefix(topic, prefix); ok {
			return authCheck{security.ResourceGroup, g, security.OpRead}
		}
	}
	return authCheck{security.ResourceTopic, aclTopic(topic), op}
}

func groupCheck(group string, op security.Operation) authCheck {
	return authCheck{security.ResourceGroup, group, op}
}

func clusterCheck(op security.Operation) authCheck {
	return authCheck{security.ResourceCluster, security.ClusterResourceName, op}
}

// requestChecks lists what a request must be allowed, by request code.
// Codes not listed only need an authenticated principal — among them
// route lookups, as on RocketMQ's name server, so that a client without
// a permission learns so from the broker's NO_PERMISSION rather than from
// a missing route.
func requestChecks(req *protocol.Command) []authCheck {
	h := req.Ext
	consume := func(topicKey, groupKey string) []authCheck {
		return []authCheck{topicCheck(h(topicKey), security.OpRead), groupCheck(h(groupKey), security.OpRead)}
	}
	switch req.Code {
	case protocol.SendMessage, protocol.SendMessageV2, protocol.SendBatchMessage, protocol.SendReplyMessage, protocol.SendReplyMessageV2:
		return []authCheck{topicCheck(sendHeaderOf(req).get("topic"), security.OpWrite)}
	case protocol.RecallMessage:
		return []authCheck{topicCheck(h("topic"), security.OpWrite)}
	case protocol.EndTransaction:
		if t := h("topic"); t != "" {
			return []authCheck{topicCheck(t, security.OpWrite)}
		}
	case protocol.PullMessage, protocol.LitePullMessage, protocol.PopMessage, protocol.AckMessage,
		protocol.ChangeMessageInvisibleTime, protocol.Notification, protocol.QueryConsumerOffset, protocol.UpdateConsumerOffset:
		return consume("topic", "consumerGroup")
	case protocol.ConsumerSendMsgBack:
		return []authCheck{groupCheck(h("group"), security.OpRead)}
	case protocol.GetConsumerListByGroup:
		return []authCheck{groupCheck(h("consumerGroup"), security.OpRead)}
	case protocol.GetMaxOffset, protocol.GetMinOffset, protocol.SearchOffsetByTimestamp,
		protocol.GetEarliestMsgStoreTime, protocol.GetTopicStatsInfo:
		return []authCheck{topicCheck(h("topic"), security.OpDescribe)}
	case protocol.QueryMessage:
		return []authCheck{topicCheck(h("topic"), security.OpRead)}
	case protocol.UpdateAndCreateTopic:
		return []authCheck{topicCheck(h("topic"), security.OpCreate)}
	case protocol.DeleteTopicInBroker, protocol.DeleteTopicInNamesrv:
		return []authCheck{topicCheck(h("topic"), security.OpDelete)}
	case protocol.DeleteSubscriptionGroup:
		return []authCheck{groupCheck(h("groupName"), security.OpDelete)}
	case protocol.GetConsumeStats, protocol.GetConsumerConnectionList:
		return []authCheck{groupCheck(h("consumerGroup"), security.OpDescribe)}
	case protocol.InvokeBrokerToResetOffset:
		return []authCheck{topicCheck(h("topic"), security.OpRead), groupCheck(h("group"), security.OpRead)}
	case protocol.GetConsumerRunningInfo:
		return []authCheck{groupCheck(h("consumerGroup"), security.OpDescribe)}
	case protocol.ConsumeMessageDirectly:
		return []authCheck{groupCheck(h("consumerGroup"), security.OpRead)}
	case protocol.InvokeBrokerToGetConsumerStatus:
		return []authCheck{topicCheck(h("topic"), security.OpDescribe), groupCheck(h("group"), security.OpDescribe)}
	case protocol.AuthCreateUser, protocol.AuthUpdateUser, protocol.AuthDeleteUser, protocol.AuthCreateACL,
		protocol.AuthUpdateACL, protocol.AuthDeleteACL:
		return []authCheck{clusterCheck(security.OpAlter)}
	case protocol.AuthGetUser, protocol.AuthListUser, protocol.AuthGetACL, protocol.AuthListACL:
		return []authCheck{clusterCheck(security.OpDescribe)}
	case protocol.GetAllTopicConfig, protocol.GetAllSubscriptionGroupConfig, protocol.GetBrokerRuntimeInfo,
		protocol.GetBrokerClusterInfo, protocol.GetAllTopicListFromNameserver:
		return []authCheck{clusterCheck(security.OpDescribe)}
	case protocol.UpdateAndCreateSubscriptionGroup:
		var b struct {
			GroupName string `json:"groupName"`
		}
		_ = json.Unmarshal(req.Body, &b)
		return []authCheck{groupCheck(b.GroupName, security.OpCreate)}
	case protocol.LockBatchMQ, protocol.UnlockBatchMQ:
		var b struct {
			ConsumerGroup string `json:"consumerGroup"`
		}
		_ = json.Unmarshal(req.Body, &b)
		return []authCheck{groupCheck(b.ConsumerGroup, security.OpRead)}
	case protocol.QueryAssignment, protocol.SetMessageRequestMode:
		var b struct {
			Topic         string `json:"topic"`
			ConsumerGroup string `json:"consumerGroup"`
		}
		_ = json.Unmarshal(req.Body, &b)
		return []authCheck{topicCheck(b.Topic, security.OpRead), groupCheck(b.ConsumerGroup, security.OpRead)}
	case protocol.BatchAckMessage:
		_, acks, err := protocol.DecodeBatchAckBody(req.Body)
		if err != nil { // the handler answers the malformed body
			return nil
		}
		var out []authCheck
		for _, a := range acks {
			out = append(out, topicCheck(a.Topic, security.OpRead), groupCheck(a.ConsumerGroup, security.OpRead))
		}
		return out
	case protocol.HeartBeat:
		var hb heartbeatData
		_ = json.Unmarshal(req.Body, &hb)
		var out []authCheck
		for _, cd := range hb.Consumers {
			out = append(out, groupCheck(cd.GroupName, security.OpRead))
			for _, sub := range cd.Subscriptions {
				if !strings.HasPrefix(sub.Topic, "%RETRY%") {
					out = append(out, topicCheck(sub.Topic, security.OpRead))
				}
			}
		}
		return out
	}
	return nil
}

// paceFetch charges what a pull or pop returns to its topic's fetch quota
// and holds the answer back for the throttle time (the clients have no
// throttle field; a late answer paces their next pull).
func (c *conn) paceFetch(ctx context.Context, p security.Principal, req, resp *protocol.Command) {
	q := c.s.opts.Quotas
	if resp == nil || resp.Code != protocol.Success || len(resp.Body) == 0 || !q.Active() {
		return
	}
	switch req.Code {
	case protocol.PullMessage, protocol.LitePullMessage, protocol.PopMessage:
	default:
		return
	}
	if n, err := topicName(req.Ext("topic")); err == nil {
		user := ""
		if !p.IsAnonymous() {
			user = p.Name
		}
		quota.Wait(ctx, q.Charge(n, user, "", quota.Fetch, len(resp.Body)))
	}
}

// quotaUser is the user a request's bytes count against ("" when
// anonymous).
func (rc *reqCtx) quotaUser() string {
	if rc.principal.IsAnonymous() {
		return ""
	}
	return rc.principal.Name
}
