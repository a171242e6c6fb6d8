package kafka

// SaslAuthenticate (key 36), versions 0-2.
//
// Version notes: carries the SASL exchange of the mechanism chosen by
// SaslHandshake (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER). v1+ answers the
// session lifetime (KIP-368): the shorter of security.max_reauth and the
// token's remaining life; after it, any request but a new handshake closes
// the connection. A failure answers SASL_AUTHENTICATION_FAILED with the
// reason, delayed more the more a source fails, and closes the connection.
// A re-authentication must prove the same principal. A connection over its
// user's, namespace's or tenant's connection quota is refused here too. A user bound to a
// namespace (security: user namespace) has its short topic names resolved
// there: "orders" is <tenant>/<namespace>/orders, "ns/orders" another
// namespace of its tenant, and topics are shown to it the same way.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
)

// expiringExchange is an exchange whose credential ends (a token).
type expiringExchange interface{ Expiry() time.Time }

func handleSaslAuthenticate(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.SASLAuthenticateRequest)
	resp := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	c := rc.conn
	if c.auth.exchange == nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		msg := "SaslAuthenticate before SaslHandshake"
		resp.ErrorMessage = &msg
		return reply{resp: resp, closeAfter: true}
	}
	out, done, err := c.auth.exchange.Step(req.SASLAuthBytes)
	if err == nil && done && c.auth.reauthing && c.auth.exchange.Principal() != c.auth.principal {
		err = security.ErrAuthentication
	}
	if err != nil {
		return rc.saslFailed(resp, err)
	}
	resp.SASLAuthBytes = out
	if !done {
		return reply{resp: resp}
	}
	s := rc.srv()
	ex := c.auth.exchange
	c.auth.principal = ex.Principal()
	c.auth.exchange, c.auth.reauthing = nil, false
	// A user bound to a namespace names topics relative to it.
	if h, ok := parseHome(s.opts.Security.UserNamespace(c.auth.principal.Name)); ok {
		c.home = h
	}
	c.auth.expires = time.Time{}
	now := time.Now()
	if d := s.opts.MaxReauth; d > 0 {
		c.auth.expires = now.Add(d)
	}
	if e, ok := ex.(expiringExchange); ok && !e.Expiry().IsZero() && (c.auth.expires.IsZero() || e.Expiry().Before(c.auth.expires)) {
		c.auth.expires = e.Expiry()
	}
	if !c.auth.expires.IsZero() {
		resp.SessionLifetimeMillis = max(c.auth.expires.Sub(now).Milliseconds(), 1)
	}
	if q := s.opts.Quotas; q.Active() && c.release == nil {
		h := c.home
		if h == defaultHome {
			h = home{}
		}
		release, err := q.OpenConnection(quota.ConnectionEntities(c.auth.principal.Name, h.tenant, h.namespace))
		if err != nil { // not a credential failure: answered at once
			c.log.Warn("connection refused by a connection quota", "principal", c.auth.principal.String(), "err", err)
			resp.ErrorCode, resp.ErrorMessage = kerr.SaslAuthenticationFailed.Code, strp(err.Error())
			return reply{resp: resp, closeAfter: true}
		}
		c.release = release
	}
	if !c.auth.authenticated.Load() {
		c.log.Info("authenticated", "principal", c.auth.principal.String(), "mechanism", c.auth.mech)
	} else {
		c.log.Debug("re-authenticated", "principal", c.auth.principal.String(), "mechanism", c.auth.mech)
	}
	c.auth.authenticated.Store(true)
	c.endAuth()
	if g := s.opts.Guard; g != nil {
		g.Succeeded(c.auth.host)
	}
	return reply{resp: resp}
}

// saslFailed answers a failed authentication: logged, delayed per the
// source's recent failures, then the connection closes.
func (rc *reqCtx) saslFailed(resp *kmsg.SASLAuthenticateResponse, err error) reply {
	c := rc.conn
	c.log.Warn("SASL authentication failed", "mechanism", c.auth.mech, "err", err)
	if g := rc.srv().opts.Guard; g != nil {
		t := time.NewTimer(g.Failed(c.auth.host))
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
		}
	}
	c.auth.exchange = nil
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := err.Error()
	resp.ErrorMessage = &msg
	return reply{resp: resp, closeAfter: true}
}
