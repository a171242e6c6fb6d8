package pulsar

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// Authentication at CONNECT, through the node's users and tokens: the
// "token" method carries a JWT the node signed (as Pulsar's token
// authentication, also what OAuth2 clients send), "basic" a user's
// "name:password", "tls" the verified client certificate of a mutual-TLS
// connection (User:<subject DN>). With authentication required, a
// connection without valid credentials is refused (AuthenticationError);
// with authorization on, producers need Write on the topic and consumers
// Read on the topic and on the subscription (a group), by the one ACL
// model every protocol shares.

var errAuthentication = errors.New("authentication failed")

// authenticate returns the principal a CONNECT proves.
func (c *conn) authenticate(m *pulsarpb.CommandConnect) (security.Principal, error) {
	sec := c.s.opts.Security
	if sec == nil || (!c.s.opts.Authentication && !sec.AuthorizationEnabled()) {
		return security.Anonymous, nil
	}
	data := string(m.GetAuthData())
	switch m.GetAuthMethodName() {
	case "token":
		p, _, err := sec.VerifyToken(strings.TrimPrefix(data, "token:"))
		if err != nil {
			return p, errors.Join(errAuthentication, err)
		}
		return p, nil
	case "basic":
		user, pass, ok := strings.Cut(data, ":")
		if !ok || !sec.VerifyPassword(user, pass) {
			return security.Principal{}, errors.Join(errAuthentication, errors.New("unknown user or wrong password"))
		}
		return security.User(user), nil
	case "tls":
		if p, ok := tlsPrincipal(c.nc); ok {
			return p, nil
		}
		return security.Principal{}, errors.Join(errAuthentication, errors.New("no verified client certificate"))
	case "", "none":
		if c.s.opts.Authentication {
			return security.Principal{}, errors.Join(errAuthentication, errors.New("credentials are required"))
		}
		return security.Anonymous, nil
	}
	return security.Principal{}, errors.Join(errAuthentication, errors.New("unsupported method "+m.GetAuthMethodName()))
}

// tlsPrincipal is the principal of a verified client certificate.
func tlsPrincipal(nc net.Conn) (security.Principal, bool) {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return security.Principal{}, false
	}
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
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

// host is the client's IP, for ACL host checks.
func (c *conn) host() string {
	if h, _, err := net.SplitHostPort(c.nc.RemoteAddr().String()); err == nil {
		return h
	}
	return c.nc.RemoteAddr().String()
}

// allowed says whether the connection's principal may do op on a topic
// (and, for a subscription, on it as a group); it answers the refusal.
func (c *conn) allowed(requestID uint64, topic model.TopicName, op security.Operation, subscription string) bool {
	sec := c.s.opts.Security
	if sec == nil || !sec.AuthorizationEnabled() {
		return true
	}
	ok := sec.Authorize(c.principal, c.host(), security.ResourceTopic, topic.Short(), op)
	if ok && subscription != "" {
		ok = sec.Authorize(c.principal, c.host(), security.ResourceGroup, subscription, security.OpRead)
	}
	if !ok {
		what := "topic " + topic.Short()
		if subscription != "" {
			what += " with subscription " + subscription
		}
		c.log.Info("pulsar request not authorized", "principal", c.principal.String(), "operation", op.String(), "resource", what)
		c.errorReply(requestID, pulsarpb.ServerError_AuthorizationError, c.principal.String()+" may not "+op.String()+" "+what)
	}
	return ok
}
