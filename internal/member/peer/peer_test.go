package peer

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// pipe connects members' Peers in memory, as the replication transport
// does: a handler's error reaches the caller as a *replication.CallError.
type pipe struct {
	peers map[model.NodeID]*fakeTransport
}

type fakeTransport struct {
	self model.NodeID
	net  *pipe
	h    replication.CallHandler
}

func (t *fakeTransport) HandleCalls(h replication.CallHandler) { t.h = h }

func (t *fakeTransport) Call(ctx context.Context, node model.NodeID, method byte, body []byte) ([]byte, error) {
	to := t.net.peers[node]
	if to == nil {
		return nil, replication.ErrPeerUnreachable
	}
	out, err := to.h(ctx, t.self, method, body)
	if err != nil {
		return nil, &replication.CallError{Msg: err.Error()}
	}
	return out, nil
}

var errFenced = errors.New("fenced")

type echo struct {
	N    int    `json:"n"`
	From string `json:"f,omitempty"`
}

func TestCallsCarryTypesAndNamedErrors(t *testing.T) {
	net := &pipe{peers: map[model.NodeID]*fakeTransport{}}
	leaders := map[int]model.NodeID{0: 1, 1: 2}
	errs := []NamedError{{"fenced", errFenced}, {"not_leader", model.ErrNotLeader}}
	members := map[model.NodeID]*Peers{}
	for _, id := range []model.NodeID{1, 2} {
		tr := &fakeTransport{self: id, net: net}
		net.peers[id] = tr
		p := New(tr, id, func(g int) model.NodeID { return leaders[g] }, errs)
		Handle(p, Verify, func(_ context.Context, from model.NodeID, req echo) (echo, error) {
			if req.N < 0 {
				return echo{}, errFenced
			}
			return echo{N: req.N + 1, From: fmt.Sprint(from)}, nil
		})
		members[id] = p
	}
	ctx := context.Background()
	got, err := CallGroup[echo, echo](ctx, members[1], 1, Verify, echo{N: 41})
	if err != nil || got.N != 42 || got.From != "1" {
		t.Fatalf("a call to group 1's leader: %+v %v", got, err)
	}
	got, err = CallGroup[echo, echo](ctx, members[1], 0, Verify, echo{N: 1})
	if err != nil || got.N != 2 || got.From != "1" {
		t.Fatalf("a call answered in place: %+v %v", got, err)
	}
	if _, err := CallGroup[echo, echo](ctx, members[1], 1, Verify, echo{N: -1}); !errors.Is(err, errFenced) {
		t.Fatalf("a named error: %v", err)
	}
	if _, err := CallGroup[echo, echo](ctx, members[1], 7, Verify, echo{}); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("a group without a leader: %v", err)
	}
	leaders[1] = 3 // a member no transport reaches
	if _, err := CallGroup[echo, echo](ctx, members[1], 1, Verify, echo{}); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("an unreachable leader: %v", err)
	}
	if _, err := members[1].CallRaw(ctx, 2, Elect, nil, 0); err == nil || errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("a method the member does not answer: %v", err)
	}
}
