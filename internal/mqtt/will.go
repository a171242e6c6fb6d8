package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

// Wills survive a broker crash: a connection's will is recorded in the
// durable state before CONNACK and cleared once it is sent or its client
// disconnects; a broker that comes back after a crash sends the wills
// still recorded — at once for a session that ended with the connection,
// after the will delay (bounded by the session's expiry) for one that
// outlives it, unless its client comes back first.

// recordWill records the will of a connecting client (nil: it has none,
// and one left from an earlier connection goes).
func (s *Server) recordWill(ctx context.Context, client string, w *willMessage) error {
	if s.store == nil {
		return nil
	}
	if w == nil {
		if !s.store.st.hasWill(client) {
			return nil
		}
		return s.store.write(ctx, []*stateRecord{{Kind: "will", Client: client}}, nil, true)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	w.id = hex.EncodeToString(id[:])
	p := &w.publish
	rec := &storedWill{ID: w.id, Message: *retainedRecord(p, client), Retain: p.Retain, DelayMs: w.delay.Milliseconds(),
		Principal: w.principal.String(), Host: w.host}
	return s.store.write(ctx, []*stateRecord{{Kind: "will", Client: client, Will: rec}}, nil, false)
}

// clearWill forgets a will sent, or whose client disconnected.
func (s *Server) clearWill(client string, w *willMessage) {
	if s.store == nil || w.id == "" {
		return
	}
	if err := s.store.write(context.Background(), []*stateRecord{{Kind: "will", Client: client, WillID: w.id}}, nil, true); err != nil {
		s.log.Warn("mqtt: clearing a will's record", "client", client, "err", err)
	}
}

// restoreWills sends the wills of the connections a crash ended (called
// by Open, the sessions restored).
func (s *Server) restoreWills() {
	for client, rec := range s.store.st.willsAt() {
		principal, err := security.ParsePrincipal(rec.Principal)
		if err != nil {
			principal = security.Anonymous
		}
		p := rec.Message.publish()
		p.Retain = rec.Retain
		w := &willMessage{publish: p, delay: time.Duration(rec.DelayMs) * time.Millisecond, principal: principal, host: rec.Host, id: rec.ID}
		ss := s.sessions[client]
		if ss == nil {
			// The session ended with its connection: the will goes now.
			ss, w.delay = newSession(s, client), 0
		}
		s.sendWill(ss, w)
	}
}
