package kafka_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func frame(key, version int16, corr int32, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(key))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// expectClosed sends raw bytes and expects the broker to close the
// connection without answering.
func expectClosed(t *testing.T, addr string, raw []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	if n != 0 || err != io.EOF {
		t.Fatalf("expected the connection closed, read %d bytes, err %v", n, err)
	}
}

// TestBadInput sends garbage, oversize frames, unknown keys and malformed
// bodies; each connection gets the right answer or is closed, and the
// broker keeps serving real clients with their data intact.
func TestBadInput(t *testing.T) {
	n := startNode(t)
	addr := n.KafkaAddr()
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, addr, kgo.DefaultProduceTopic("survivor"), kgo.AllowAutoTopicCreation())
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("before")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	garbage := make([]byte, 40)
	for i := range garbage {
		garbage[i] = byte(i*37 + 11)
	}
	binary.BigEndian.PutUint32(garbage, 36)
	t.Run("garbage", func(t *testing.T) { expectClosed(t, addr, garbage) })
	t.Run("oversize", func(t *testing.T) {
		expectClosed(t, addr, binary.BigEndian.AppendUint32(nil, 1<<30))
	})
	t.Run("negative size", func(t *testing.T) {
		expectClosed(t, addr, binary.BigEndian.AppendUint32(nil, 0xfffffff0))
	})
	t.Run("unknown key", func(t *testing.T) { expectClosed(t, addr, frame(999, 0, 1, nil)) })
	t.Run("unsupported version", func(t *testing.T) { expectClosed(t, addr, frame(3, 99, 1, nil)) })
	t.Run("truncated produce", func(t *testing.T) { expectClosed(t, addr, frame(0, 7, 1, []byte{0, 1})) })
	t.Run("apiversions too new", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(frame(18, 99, 7, nil)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatal(err)
		}
		if corr := int32(binary.BigEndian.Uint32(body)); corr != 7 {
			t.Fatalf("correlation id %d", corr)
		}
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(0)
		if err := resp.ReadFrom(body[4:]); err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) == 0 {
			t.Fatalf("downgrade answer: %+v", resp)
		}
	})
	t.Run("corrupt batch", func(t *testing.T) {
		b := rawBatch(-1, -1, -1, "x")
		b[len(b)-1] ^= 0xff // CRC no longer matches
		code, _ := produceRaw(t, cl, "survivor", b)
		if code != kerr.CorruptMessage.Code {
			t.Fatalf("corrupt batch: code %d", code)
		}
	})

	// Still serving, and the data is intact.
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("after")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, addr, kgo.ConsumeTopics("survivor"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var vals []string
	for len(vals) < 2 {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { vals = append(vals, string(r.Value)) })
	}
	if len(vals) != 2 || vals[0] != "before" || vals[1] != "after" {
		t.Fatalf("records %v", vals)
	}
}
