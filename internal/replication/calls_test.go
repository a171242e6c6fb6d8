package replication

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestCalls: members call each other over the Raft transport both ways,
// failures come back as CallError, and a call to a member without a
// connection fails at once.
func TestCalls(t *testing.T) {
	lns := map[model.NodeID]net.Listener{}
	addrs := map[model.NodeID]string{}
	for _, id := range []model.NodeID{1, 2, 3} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[id], addrs[id] = l, l.Addr().String()
	}
	trs := map[model.NodeID]*TCPTransport{}
	for _, id := range []model.NodeID{1, 2} {
		tr, err := NewTCPTransport(TCPConfig{Cluster: "c", Node: id, Listener: lns[id], Peers: addrs, Secret: "s"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		tr.HandleCalls(func(ctx context.Context, from model.NodeID, method byte, body []byte) ([]byte, error) {
			if method == 9 {
				return nil, errors.New("refused")
			}
			return append([]byte{byte(id), byte(from), method}, body...), nil
		})
		trs[id] = tr
	}
	lns[3].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	var err error
	for ctx.Err() == nil { // until the connection is up
		if out, err = trs[1].Call(ctx, 2, 7, []byte("hi")); !errors.Is(err, ErrPeerUnreachable) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || !bytes.Equal(out, []byte{2, 1, 7, 'h', 'i'}) {
		t.Fatalf("call 1→2: %q %v", out, err)
	}
	if out, err = trs[2].Call(ctx, 1, 5, nil); err != nil || !bytes.Equal(out, []byte{1, 2, 5}) {
		t.Fatalf("call 2→1: %q %v", out, err)
	}
	var ce *CallError
	if _, err = trs[1].Call(ctx, 2, 9, nil); !errors.As(err, &ce) || ce.Msg != "refused" {
		t.Fatalf("failed call: %v", err)
	}
	if _, err = trs[1].Call(ctx, 3, 1, nil); !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("call to a member without a connection: %v", err)
	}
}

// FuzzDecodeCall: any call frame body decodes or fails cleanly.
func FuzzDecodeCall(f *testing.F) {
	f.Add(encodeCall(callRequest, 7, 2, []byte("body")))
	f.Add(encodeCall(callFailed, 1, 0, nil))
	f.Add([]byte{9})
	f.Fuzz(func(t *testing.T, data []byte) {
		kind, id, method, body, err := decodeCall(data)
		if err == nil && !bytes.Equal(encodeCall(kind, id, method, body), data) {
			t.Fatal("call frame does not round-trip")
		}
	})
}
