package replication

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// Calls between members ride the Raft transport's connections (so they are
// authenticated and cut by the same partitions): a frame of the reserved
// group callGroup carries a request or its answer, matched by an id.

const (
	callGroup    = 0xFFFE
	callRequest  = 1
	callAnswer   = 2
	callFailed   = 3
	callHeader   = 1 + 8 + 1 // kind | id u64 | method (requests) or nothing
	maxCallBytes = 16 << 20
	// callWork bounds how long a member works on one call of a peer.
	callWork = 30 * time.Second
)

// ErrPeerUnreachable is a call to a member this one has no connection to.
var ErrPeerUnreachable = errors.New("member unreachable")

// ErrNotSent is a call that failed before anything of it was sent (no
// connection, or a full send queue): trying it again cannot do it twice.
var ErrNotSent = fmt.Errorf("%w: call not sent", ErrPeerUnreachable)

// CallError is a failure the called member reported.
type CallError struct{ Msg string }

func (e *CallError) Error() string { return e.Msg }

// CallHandler answers a peer's call: method and body as the caller sent
// them.
type CallHandler func(ctx context.Context, from model.NodeID, method byte, body []byte) ([]byte, error)

// calls tracks a transport's calls in flight.
type calls struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]pendingCall
	handler CallHandler
}

// pendingCall is a call waiting for its answer from a peer.
type pendingCall struct {
	ch   chan callResult
	node model.NodeID
}

// failCalls fails the calls waiting for an answer from node, whose
// connection ended: an answer would come on that connection, and a process
// that died never sends it.
func (t *TCPTransport) failCalls(node model.NodeID) {
	t.calls.mu.Lock()
	defer t.calls.mu.Unlock()
	for _, pc := range t.calls.pending {
		if pc.node == node {
			select {
			case pc.ch <- callResult{err: fmt.Errorf("%w: %d (its connection ended)", ErrPeerUnreachable, node)}:
			default:
			}
		}
	}
}

type callResult struct {
	body []byte
	err  error
}

// encodeCall builds a call frame's body.
func encodeCall(kind byte, id uint64, method byte, body []byte) []byte {
	out := make([]byte, 0, callHeader+len(body))
	out = append(out, kind)
	out = binary.BigEndian.AppendUint64(out, id)
	out = append(out, method)
	return append(out, body...)
}

// decodeCall reads a call frame's body.
func decodeCall(b []byte) (kind byte, id uint64, method byte, body []byte, err error) {
	if len(b) < callHeader {
		return 0, 0, 0, nil, fmt.Errorf("%w: call frame of %d bytes", model.ErrCorruptRecord, len(b))
	}
	kind, id, method, body = b[0], binary.BigEndian.Uint64(b[1:9]), b[9], b[10:]
	if kind < callRequest || kind > callFailed {
		return 0, 0, 0, nil, fmt.Errorf("%w: call frame kind %d", model.ErrCorruptRecord, kind)
	}
	return kind, id, method, body, nil
}

// HandleCalls sets what answers other members' calls.
func (t *TCPTransport) HandleCalls(h CallHandler) {
	t.calls.mu.Lock()
	t.calls.handler = h
	t.calls.mu.Unlock()
}

// Call sends a request to a member and waits for its answer, ctx's end, or
// the connection's loss (ErrPeerUnreachable when there is none).
func (t *TCPTransport) Call(ctx context.Context, node model.NodeID, method byte, body []byte) ([]byte, error) {
	p := t.peer(node)
	if p == nil {
		return nil, fmt.Errorf("%w: no member %d", ErrNotSent, node)
	}
	if len(body) > maxCallBytes {
		return nil, fmt.Errorf("call of %d bytes", len(body))
	}
	if conn, _ := p.current(); conn == nil {
		return nil, fmt.Errorf("%w: no connection to %d", ErrNotSent, node)
	}
	ch := make(chan callResult, 1)
	t.calls.mu.Lock()
	if t.calls.pending == nil {
		t.calls.pending = map[uint64]pendingCall{}
	}
	t.calls.next++
	id := t.calls.next
	t.calls.pending[id] = pendingCall{ch: ch, node: node}
	t.calls.mu.Unlock()
	defer func() {
		t.calls.mu.Lock()
		delete(t.calls.pending, id)
		t.calls.mu.Unlock()
	}()
	select {
	case p.sendCh <- frame{group: callGroup, raw: encodeCall(callRequest, id, method, body)}:
	default:
		return nil, fmt.Errorf("%w: %d (send queue full)", ErrNotSent, node)
	}
	select {
	case r := <-ch:
		return r.body, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// deliverCall handles a call frame from peer p.
func (t *TCPTransport) deliverCall(ctx context.Context, p *peer, b []byte) error {
	kind, id, method, body, err := decodeCall(b)
	if err != nil {
		return err
	}
	if kind != callRequest {
		t.calls.mu.Lock()
		ch := t.calls.pending[id].ch
		t.calls.mu.Unlock()
		if ch != nil {
			r := callResult{body: body}
			if kind == callFailed {
				r = callResult{err: &CallError{Msg: string(body)}}
			}
			select {
			case ch <- r:
			default:
			}
		}
		return nil
	}
	t.calls.mu.Lock()
	h := t.calls.handler
	t.calls.mu.Unlock()
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		var out []byte
		err := errors.New("this member answers no calls")
		if h != nil {
			cctx, cancel := context.WithTimeout(ctx, callWork)
			out, err = h(cctx, p.id, method, body)
			cancel()
		}
		reply := encodeCall(callAnswer, id, method, out)
		if err != nil {
			reply = encodeCall(callFailed, id, method, []byte(err.Error()))
		}
		select {
		case p.sendCh <- frame{group: callGroup, raw: reply}:
		case <-ctx.Done():
		}
	}()
	return nil
}
