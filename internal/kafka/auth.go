package kafka

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

// Security protocols of Kafka listeners (Kafka's security.protocol).
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// Listener is one named Kafka listener, as Kafka's listeners and
// advertised.listeners configure them.
type Listener struct {
	Name       string // e.g. PLAINTEXT, SASL_SSL, INTERNAL
	Protocol   string // one of the Protocol constants
	Advertised string // host:port told to clients; empty: the server's default
}

// SASL reports whether the listener authenticates with SASL.
func (l Listener) SASL() bool {
	return l.Protocol == ProtocolSASLPlaintext || l.Protocol == ProtocolSASLSSL
}

// TLS reports whether the listener is TLS only.
func (l Listener) TLS() bool { return l.Protocol == ProtocolSSL || l.Protocol == ProtocolSASLSSL }

// ParseListeners reads Kafka's listeners syntax, "NAME://host:port,…",
// with a protocol map "NAME:PROTOCOL,…" (listener.security.protocol.map;
// names that are protocols map to themselves) and advertised listeners in
// the same syntax. It returns the listeners and their bind addresses.
func ParseListeners(listeners, protocolMap, advertised string) ([]Listener, []string, error) {
	protos := map[string]string{}
	for _, p := range []string{ProtocolPlaintext, ProtocolSSL, ProtocolSASLPlaintext, ProtocolSASLSSL} {
		protos[p] = p
	}
	for _, kv := range splitList(protocolMap) {
		name, proto, ok := strings.Cut(kv, ":")
		proto = strings.ToUpper(strings.TrimSpace(proto))
		if !ok || protos[proto] != proto || proto == "" {
			return nil, nil, fmt.Errorf("listener protocol map entry %q: want NAME:PROTOCOL with PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", kv)
		}
		protos[strings.ToUpper(strings.TrimSpace(name))] = proto
	}
	adv := map[string]string{}
	for _, e := range splitList(advertised) {
		name, addr, ok := strings.Cut(e, "://")
		if !ok {
			return nil, nil, fmt.Errorf("advertised listener %q: want NAME://host:port", e)
		}
		adv[strings.ToUpper(name)] = addr
	}
	var out []Listener
	var addrs []string
	seen := map[string]bool{}
	for _, e := range splitList(listeners) {
		name, addr, ok := strings.Cut(e, "://")
		name = strings.ToUpper(name)
		if !ok {
			return nil, nil, fmt.Errorf("listener %q: want NAME://host:port", e)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, nil, fmt.Errorf("listener %q: %w", e, err)
		}
		proto, ok := protos[name]
		if !ok {
			return nil, nil, fmt.Errorf("listener %q: no security protocol for %s (add it to the protocol map)", e, name)
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("listener name %s used twice", name)
		}
		seen[name] = true
		out = append(out, Listener{Name: name, Protocol: proto, Advertised: adv[name]})
		addrs = append(addrs, addr)
	}
	for name := range adv {
		if !seen[name] {
			return nil, nil, fmt.Errorf("advertised listener %s is not a listener", name)
		}
	}
	return out, addrs, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// connAuth is a connection's authentication state. It is read and written
// by the connection's processor goroutine; authenticated is also read by
// the unauthenticated-connection timer.
type connAuth struct {
	principal     security.Principal
	host          string // the client's IP, for ACL host checks
	needSASL      bool
	authenticated atomic.Bool
	reauthing     bool
	mech          string
	exchange      security.SASLExchange
	expires       time.Time // end of the session (KIP-368); zero: none
	admitted      bool      // counted by the guard until authenticated
}

// startAuth sets a new connection's principal and, on SASL listeners,
// bounds how long and how many connections may stay unauthenticated.
// It returns false when the connection must be refused.
func (c *conn) startAuth() bool {
	c.auth.principal = security.Anonymous
	if addr, ok := c.nc.RemoteAddr().(*net.TCPAddr); ok {
		c.auth.host = addr.IP.String()
	} else if h, _, err := net.SplitHostPort(c.nc.RemoteAddr().String()); err == nil {
		c.auth.host = h
	}
	if p, ok := tlsPrincipal(c.nc); ok {
		c.auth.principal = p
	}
	if !c.listener.SASL() {
		return true
	}
	c.auth.needSASL = true
	if g := c.s.opts.Guard; g != nil {
		if !g.Admit() {
			c.log.Warn("refusing connection: too many unauthenticated connections")
			return false
		}
		c.auth.admitted = true
	}
	if d := c.s.opts.AuthTimeout; d > 0 {
		t := time.AfterFunc(d, func() {
			if !c.auth.authenticated.Load() {
				c.log.Warn("closing connection: not authenticated in time", "timeout", d)
				c.nc.Close()
			}
		})
		go func() { <-c.ctx.Done(); t.Stop() }()
	}
	return true
}

// endAuth releases the guard's count of an unauthenticated connection.
func (c *conn) endAuth() {
	if c.auth.admitted {
		c.auth.admitted = false
		c.s.opts.Guard.Done()
	}
}

// tlsPrincipal returns the principal of a verified client certificate
// (mutual TLS): User:<subject distinguished name>, as Kafka's default
// principal builder names it.
func tlsPrincipal(nc net.Conn) (security.Principal, bool) {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return security.Principal{}, false
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second)) // a stalled handshake does not hold the connection
	err := tc.Handshake()
	_ = tc.SetDeadline(time.Time{})
	if err != nil {
		return security.Principal{}, false
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return security.Principal{}, false
	}
	return security.User(st.PeerCertificates[0].Subject.String()), true
}

// admitRequest decides whether a request may run on this connection given
// its authentication state: before SASL completes (and after its session
// expired) only ApiVersions, SaslHandshake and SaslAuthenticate may.
func (c *conn) admitRequest(key int16) bool {
	if !c.auth.needSASL || key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey {
		return true
	}
	if !c.auth.authenticated.Load() || c.auth.reauthing {
		c.log.Warn("closing connection: request before SASL authentication completed", "api", key)
		return false
	}
	if !c.auth.expires.IsZero() && time.Now().After(c.auth.expires) {
		c.log.Info("closing connection: SASL session expired without re-authentication", "principal", c.auth.principal.String())
		return false
	}
	return true
}

// authorized asks the authorizer whether this connection's principal may
// perform op on a resource; true whenever authorization is off.
func (r *reqCtx) authorized(rt security.ResourceType, name string, op security.Operation) bool {
	sec := r.srv().opts.Security
	if sec == nil || !sec.AuthorizationEnabled() {
		return true
	}
	ok := sec.Authorize(r.conn.auth.principal, r.conn.auth.host, rt, name, op)
	if !ok {
		r.conn.log.Debug("request not authorized", "principal", r.conn.auth.principal.String(), "resource", rt, "name", name, "operation", op)
	}
	return ok
}

// authorizedCluster is authorized on the cluster resource.
func (r *reqCtx) authorizedCluster(op security.Operation) bool {
	return r.authorized(security.ResourceCluster, security.ClusterResourceName, op)
}

// authorizedAny is true when the principal may perform op on some resource
// of the type (Kafka's authorizeByResourceType).
func (r *reqCtx) authorizedAny(rt security.ResourceType, op security.Operation) bool {
	sec := r.srv().opts.Security
	if sec == nil || !sec.AuthorizationEnabled() {
		return true
	}
	return sec.AuthorizeAny(r.conn.auth.principal, r.conn.auth.host, rt, op)
}

// authzOn reports whether requests are checked at all (off: no work).
func (r *reqCtx) authzOn() bool {
	sec := r.srv().opts.Security
	return sec != nil && sec.AuthorizationEnabled()
}

// allowedTopic checks an operation on a topic named as the client names
// it; ACLs name topics by their short name ("orders" is
// public/default/orders), so every spelling of one topic is one resource.
func (r *reqCtx) allowedTopic(name string, op security.Operation) bool {
	if !r.authzOn() {
		return true
	}
	if n, err := r.topicName(name); err == nil {
		name = n.Short()
	}
	return r.authorized(security.ResourceTopic, name, op)
}

// allowedGroup checks an operation on a consumer group.
func (r *reqCtx) allowedGroup(group string, op security.Operation) bool {
	return r.authorized(security.ResourceGroup, group, op)
}

// allowedTxnID checks an operation on a transactional id.
func (r *reqCtx) allowedTxnID(id string, op security.Operation) bool {
	return r.authorized(security.ResourceTransactionalID, id, op)
}

// Authorization failures as errors, for handlers that report per item.
var (
	errTopicAuthorization   = &kafkaCodeError{code: kerr.TopicAuthorizationFailed.Code, msg: "not authorized to access the topic"}
	errGroupAuthorization   = &kafkaCodeError{code: kerr.GroupAuthorizationFailed.Code, msg: "not authorized to access the group"}
	errTxnIDAuthorization   = &kafkaCodeError{code: kerr.TransactionalIDAuthorizationFailed.Code, msg: "not authorized to use the transactional id"}
	errClusterAuthorization = &kafkaCodeError{code: kerr.ClusterAuthorizationFailed.Code, msg: "not authorized on the cluster"}
)

// allowedCreateTopic: Create on the cluster or on the topic (Kafka's rule
// for CreateTopics and auto-creation).
func (r *reqCtx) allowedCreateTopic(name string) bool {
	return r.authorizedCluster(security.OpCreate) || r.allowedTopic(name, security.OpCreate)
}

// securityGate is the admin APIs' first check: SECURITY_DISABLED without
// the security service, CLUSTER_AUTHORIZATION_FAILED without op on the
// cluster, 0 to go on.
func (r *reqCtx) securityGate(op security.Operation) int16 {
	switch {
	case r.srv().opts.Security == nil:
		return kerr.SecurityDisabled.Code
	case !r.authorizedCluster(op):
		return kerr.ClusterAuthorizationFailed.Code
	}
	return 0
}

// quotaUser is the user a connection's bytes count against ("" when
// anonymous).
func (r *reqCtx) quotaUser() string {
	if p := r.conn.auth.principal; !p.IsAnonymous() && p.Type == "User" {
		return p.Name
	}
	return ""
}
