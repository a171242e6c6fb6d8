package kafka

// SaslHandshake (key 17), versions 0-1.
//
// Version notes: v0 is advertised because librdkafka detects SASL support
// by it, but its unframed tokens after the handshake are not read: a v0
// handshake is refused with ILLEGAL_SASL_STATE (clients that see v1 and
// SaslAuthenticate — all current ones — use them). A handshake on a connection that has
// authenticated starts a re-authentication (KIP-368). On a listener
// without SASL the answer is ILLEGAL_SASL_STATE.

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

func handleSaslHandshake(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.SASLHandshakeRequest)
	resp := req.ResponseKind().(*kmsg.SASLHandshakeResponse)
	c := rc.conn
	mechs := rc.srv().opts.SASLMechanisms
	resp.SupportedMechanisms = mechs
	if req.Version == 0 {
		c.log.Warn("SASL handshake v0 (unframed tokens) is not supported; the client must use v1 and SaslAuthenticate")
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return reply{resp: resp, closeAfter: true}
	}
	if !c.auth.needSASL || c.auth.exchange != nil {
		resp.ErrorCode = kerr.IllegalSaslState.Code
		return reply{resp: resp, closeAfter: c.auth.exchange != nil}
	}
	if !slices.Contains(mechs, req.Mechanism) {
		c.log.Warn("SASL mechanism not enabled", "mechanism", req.Mechanism, "enabled", mechs)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return reply{resp: resp, closeAfter: true}
	}
	ex, err := rc.srv().opts.Security.NewSASL(req.Mechanism)
	if err != nil {
		c.log.Warn("SASL mechanism unavailable", "mechanism", req.Mechanism, "err", err)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return reply{resp: resp, closeAfter: true}
	}
	c.auth.mech, c.auth.exchange = req.Mechanism, ex
	c.auth.reauthing = c.auth.authenticated.Load()
	return reply{resp: resp}
}
