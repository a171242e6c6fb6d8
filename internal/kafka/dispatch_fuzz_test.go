package kafka

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/storage"
)

func fuzzServer(t testing.TB) *Server { return testServer(t, Options{}) }

// testServer is a server over a fresh engine and store with opts.
func testServer(t testing.TB, opts Options) *Server {
	return NewSingle(testBackend(t, broker.Options{AutoCreateTopics: true, DefaultQueues: 2, MaxQueuesPerTopic: 16}), opts)
}

// testBackend is a broker stack over a fresh engine and store.
func testBackend(t testing.TB, bo broker.Options) Backend {
	dir := t.TempDir()
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.SegmentSize, c.MaxRecordSize, c.MinFreeBytes, c.MinFreeRatio = 8<<20, 1<<20, 0, 0
	e, err := storage.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(context.Background(), e, m, bo)
	if err != nil {
		t.Fatal(err)
	}
	g := groups.New(groups.Options{})
	t.Cleanup(func() { g.Close(); b.Close(); m.Close(); e.Close() })
	return Backend{Broker: b, Groups: g}
}

// FuzzDispatch decodes arbitrary bodies for every supported API key and
// version and runs the handler: bad input must never panic the broker.
func FuzzDispatch(f *testing.F) {
	for _, h := range handlerTable() {
		req := kmsg.RequestForKey(h.key)
		req.SetVersion(h.max)
		f.Add(byte(h.key), byte(h.max), req.AppendTo(nil))
	}
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(9)
	topic := "fuzz"
	meta.Topics = []kmsg.MetadataRequestTopic{{Topic: &topic}}
	meta.AllowAutoTopicCreation = true
	f.Add(byte(3), byte(9), meta.AppendTo(nil))
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, key, version byte, body []byte) {
		h := lookupHandler(int16(key % 128))
		if h == nil {
			return
		}
		v := h.min + int16(version)%(h.max-h.min+1)
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := newConn(s, a, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c.ctx, c.cancel = ctx, cancel
		// A handler must return soon after its context ends.
		watchdog := time.AfterFunc(10*time.Second, func() {
			panic(fmt.Sprintf("%s v%d did not return: body %x", kmsg.NameForKey(h.key), v, body))
		})
		defer watchdog.Stop()
		r := c.dispatch(&request{hdr: requestHeader{Key: h.key, Version: v, ClientID: "fuzz"}, body: body})
		if r.await != nil {
			r.await()
		}
		if r.resp != nil {
			_ = encodeResponse(nil, requestHeader{Key: h.key, Version: v}, r.resp)
		}
	})
}

// FuzzDecodeConsumerProtocol: a classic member's metadata and assignment
// (bytes a client sent) never make the decoder panic.
func FuzzDecodeConsumerProtocol(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 1, 'a', 0, 0, 0, 0}, []byte{0, 0, 0, 0, 0, 1, 0, 1, 'a', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, metadata, assignment []byte) {
		DecodeConsumerProtocol(metadata, assignment)
	})
}
