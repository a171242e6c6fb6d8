package grpcv5

// Auto-renewal of push consumers' leases: a PushConsumer asks for
// auto_renew instead of an invisible time. Its messages are handed out for
// renewInvisible; while the client keeps a telemetry stream open, the
// server renews each lease renewAhead before it ends (the receipt handle
// stays valid), for at most renewMax; acknowledging, changing the
// invisible time or dead-lettering ends the renewal. A client that goes
// away stops being renewed, so its messages come back to the group once
// their lease ends.

import (
	"context"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
)

const (
	renewInvisible = 30 * time.Second
	renewAhead     = 10 * time.Second
	renewMax       = 3 * time.Hour
)

type leaseKey struct {
	queue  model.QueueID
	offset model.QueueOffset
}

type renewal struct {
	client string
	group  string
	handle pop.Handle
	since  time.Time
}

// renewals are the auto-renewed leases.
type renewals struct {
	mu     sync.Mutex
	leases map[leaseKey]*renewal
}

func (r *renewals) add(client, group string, h pop.Handle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leases == nil {
		r.leases = map[leaseKey]*renewal{}
	}
	r.leases[leaseKey{h.Queue, h.Offset}] = &renewal{client: client, group: group, handle: h, since: time.Now()}
}

func (r *renewals) remove(h pop.Handle) {
	r.mu.Lock()
	delete(r.leases, leaseKey{h.Queue, h.Offset})
	r.mu.Unlock()
}

// renewDue renews the leases that end within renewAhead (every second).
func (s *Server) renewDue(ctx context.Context) error {
	now := time.Now()
	connected := s.clients.connected()
	var due []*renewal
	s.renew.mu.Lock()
	for k, r := range s.renew.leases {
		switch {
		case !connected[r.client] || now.Sub(r.since) > renewMax:
			delete(s.renew.leases, k) // left to come back when its lease ends
		case time.UnixMilli(r.handle.Deadline).Sub(now) <= renewAhead:
			due = append(due, r)
		}
	}
	s.renew.mu.Unlock()
	for _, r := range due {
		err := s.pop.Renew(ctx, r.group, r.handle, renewInvisible)
		s.renew.mu.Lock()
		if err != nil {
			delete(s.renew.leases, leaseKey{r.handle.Queue, r.handle.Offset})
		} else {
			r.handle.Deadline = now.Add(renewInvisible).UnixMilli()
		}
		s.renew.mu.Unlock()
	}
	return nil
}
