// Package peer carries the calls one cluster member makes to another over
// the replication transport (authenticated like Raft's traffic and cut by
// the same partitions): a transaction coordinator's calls to the leaders of
// other groups, admin API requests for a group, preferred leader elections
// and engine images. It holds the one table of call methods and, given by
// the composition root, the one table of errors an answer carries by name,
// so a caller sees a remote failure as the same sentinel a local one is
// (and maps it to the same protocol code).
//
// Bodies are JSON unless a method says otherwise (an image chunk is raw
// bytes). A call to a group goes to the member leading it: answered in
// place, with no encoding, when that is this member.
package peer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// Method is a call between members. The numbers travel on the wire: never
// reuse one.
type Method byte

// The methods.
const (
	Verify          Method = 1  // txn coordinator → partition leader: is a partition in an open transaction
	TxnOffsetCommit Method = 2  // group coordinator → txn coordinator: offsets pending in a transaction
	WriteMarkers    Method = 3  // txn coordinator → partition leader: a decided transaction's markers
	CommitOffsets   Method = 4  // txn coordinator → group coordinator: a committed transaction's offsets
	Admin           Method = 5  // any member → group leader: an admin API request for its group
	ImageOpen       Method = 6  // replica → group leader: open an image of the group's engine
	ImageRead       Method = 7  // replica → group leader: a chunk of one of its files (raw answer)
	ImageClose      Method = 8  // replica → group leader: done with it (fetched, or given up)
	Elect           Method = 9  // any member → group leader: hand the group to a member
	KafkaForward    Method = 10 // protocol-only node → group leader: a client's Kafka request (raw)
	MoveQueue       Method = 11 // any member → group 0's leader: move a queue to another group
	MoveSeal        Method = 12 // group 0's leader → the queue's group's leader: seal it for a move
	MoveTake        Method = 13 // group 0's leader → the new group's leader: carry the queue on from its end
	MoveUnseal      Method = 14 // group 0's leader → the queue's group's leader: a move given up
	QueueHistory    Method = 15 // a moved queue's group leader → an old group's leader: records of its piece there
	QueueAppend     Method = 16 // a moved queue's home leader → the leader of its group now: append its clients' records
	QueueRead       Method = 17 // a moved queue's home leader → a group holding a piece of it: read records
	QueueOffsets    Method = 18 // a moved queue's home leader → the leader of its group now: its offsets there
	QueueWait       Method = 19 // a moved queue's home leader → the leader of its group now: wait for records
	QueueProducer   Method = 20 // a moved queue's group leader → its previous group's leader: a producer's sequence state there
)

var methodNames = map[Method]string{Verify: "verify", TxnOffsetCommit: "txn-offset-commit", WriteMarkers: "write-markers",
	CommitOffsets: "commit-offsets", Admin: "admin", ImageOpen: "image-open", ImageRead: "image-read", ImageClose: "image-close", Elect: "elect", KafkaForward: "kafka-forward",
	MoveQueue: "move-queue", MoveSeal: "move-seal", MoveTake: "move-take", MoveUnseal: "move-unseal", QueueHistory: "queue-history",
	QueueAppend: "queue-append", QueueRead: "queue-read", QueueOffsets: "queue-offsets", QueueWait: "queue-wait",
	QueueProducer: "queue-producer"}

func (m Method) String() string {
	if n, ok := methodNames[m]; ok {
		return n
	}
	return fmt.Sprintf("method-%d", byte(m))
}

// Timeout bounds one call to another member unless its caller says
// otherwise.
const Timeout = 5 * time.Second

// NamedError is an error an answer carries by name.
type NamedError struct {
	Name string
	Err  error
}

// Transport carries calls (replication.TCPTransport).
type Transport interface {
	Call(ctx context.Context, node model.NodeID, method byte, body []byte) ([]byte, error)
	HandleCalls(h replication.CallHandler)
}

// Handler answers a call's raw body.
type Handler func(ctx context.Context, from model.NodeID, body []byte) ([]byte, error)

// Peers makes and answers a member's calls.
type Peers struct {
	t      Transport
	self   model.NodeID
	errs   []NamedError
	leader func(g int) model.NodeID // a group's leader, 0 while none is known

	mu       sync.RWMutex
	handlers map[Method]Handler
	local    map[Method]any // typed handlers, for calls answered in place
}

// New makes the member's Peers over t and answers t's calls. leader names
// a group's leader (0 while none is known, or for no such group); errs are
// the errors answers carry by name.
func New(t Transport, self model.NodeID, leader func(g int) model.NodeID, errs []NamedError) *Peers {
	p := &Peers{t: t, self: self, errs: errs, leader: leader, handlers: map[Method]Handler{}, local: map[Method]any{}}
	t.HandleCalls(p.answer)
	return p
}

// HandleRaw answers method m's calls with h, body as sent.
func (p *Peers) HandleRaw(m Method, h Handler) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handlers[m] = h
}

// Handle answers method m's calls with h, the request and the answer
// JSON-encoded on the wire. A call this member makes to a group it leads
// runs h in place.
func Handle[Req, Resp any](p *Peers, m Method, h func(ctx context.Context, from model.NodeID, req Req) (Resp, error)) {
	p.HandleRaw(m, func(ctx context.Context, from model.NodeID, body []byte) ([]byte, error) {
		var req Req
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, fmt.Errorf("%s call from member %d: %w", m, from, err)
		}
		resp, err := h(ctx, from, req)
		if err != nil {
			return nil, err
		}
		return json.Marshal(resp)
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.local[m] = h
}

// answer answers a peer's call, naming its error for the caller.
func (p *Peers) answer(ctx context.Context, from model.NodeID, method byte, body []byte) ([]byte, error) {
	p.mu.RLock()
	h := p.handlers[Method(method)]
	p.mu.RUnlock()
	if h == nil {
		return nil, fmt.Errorf("unknown call method %d", method)
	}
	out, err := h(ctx, from, body)
	if err != nil {
		return nil, p.nameError(err)
	}
	return out, nil
}

// nameError names a handler's error for its answer.
func (p *Peers) nameError(err error) error {
	for _, ne := range p.errs {
		if errors.Is(err, ne.Err) {
			return fmt.Errorf("%s|%v", ne.Name, err)
		}
	}
	return err
}

// callError maps a call's failure back to the error it names; a member
// that cannot be reached, or that no longer leads the group, is
// model.ErrNotLeader (retriable: the group's leader is being found).
func (p *Peers) callError(err error) error {
	var ce *replication.CallError
	if errors.As(err, &ce) {
		if name, msg, ok := strings.Cut(ce.Msg, "|"); ok {
			for _, ne := range p.errs {
				if ne.Name == name {
					return fmt.Errorf("%w (%s)", ne.Err, msg)
				}
			}
		}
		return errors.New(ce.Msg)
	}
	return fmt.Errorf("%w: %w", model.ErrNotLeader, err)
}

// CallRaw calls member node, waiting at most timeout (0: Timeout).
func (p *Peers) CallRaw(ctx context.Context, node model.NodeID, m Method, body []byte, timeout time.Duration) ([]byte, error) {
	if timeout <= 0 {
		timeout = Timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := p.t.Call(ctx, node, byte(m), body)
	if err != nil {
		return nil, p.callError(err)
	}
	return out, nil
}

// Call calls member node with a JSON request and decodes its JSON answer
// (none decoded from an empty answer).
func Call[Req, Resp any](ctx context.Context, p *Peers, node model.NodeID, m Method, req Req) (Resp, error) {
	return callWithin[Req, Resp](ctx, p, node, m, req, 0)
}

// callWithin is Call waiting at most timeout (0: Timeout).
func callWithin[Req, Resp any](ctx context.Context, p *Peers, node model.NodeID, m Method, req Req, timeout time.Duration) (Resp, error) {
	var resp Resp
	body, err := json.Marshal(req)
	if err != nil {
		return resp, err
	}
	out, err := p.CallRaw(ctx, node, m, body, timeout)
	if err != nil || len(out) == 0 {
		return resp, err
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return resp, fmt.Errorf("%s answer of member %d: %w", m, node, err)
	}
	return resp, nil
}

// CallGroup calls the member leading group g: in place when that is this
// member (its error unnamed, as a local failure), over the transport
// otherwise.
func CallGroup[Req, Resp any](ctx context.Context, p *Peers, g int, m Method, req Req) (Resp, error) {
	return CallGroupWithin[Req, Resp](ctx, p, g, m, req, 0)
}

// CallGroupWithin is CallGroup waiting at most timeout (0: Timeout) for a
// call over the transport.
func CallGroupWithin[Req, Resp any](ctx context.Context, p *Peers, g int, m Method, req Req, timeout time.Duration) (Resp, error) {
	var resp Resp
	switch leader := p.leader(g); leader {
	case 0:
		return resp, fmt.Errorf("%w: group %d has no leader", model.ErrNotLeader, g)
	case p.self:
		p.mu.RLock()
		h, ok := p.local[m].(func(context.Context, model.NodeID, Req) (Resp, error))
		p.mu.RUnlock()
		if !ok {
			return resp, fmt.Errorf("%s: no local handler for %T", m, req)
		}
		return h(ctx, p.self, req)
	default:
		return callWithin[Req, Resp](ctx, p, leader, m, req, timeout)
	}
}
