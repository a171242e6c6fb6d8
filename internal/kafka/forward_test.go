package kafka

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestForwardCodec: a forwarded request and an answer survive their
// encoding.
func TestForwardCodec(t *testing.T) {
	f := Forwarded{Stream: 7, Seq: 3, Principal: "User:alice", ClientAddr: "127.0.0.1:5000", ClientID: "c", Key: 0, Version: 9, Body: []byte{1, 2, 3}}
	got, err := DecodeForwarded(AppendForwarded(nil, f))
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("request: %+v %v", got, err)
	}
	a := ForwardAnswer{Body: []byte{4, 5}, Close: true, Principal: "User:bob", Groups: map[string][]int32{"t": {0, 1, 2}}}
	gotA, err := DecodeForwardAnswer(AppendForwardAnswer(nil, a))
	if err != nil || !reflect.DeepEqual(gotA, a) {
		t.Fatalf("answer: %+v %v", gotA, err)
	}
	if _, err := parsePrincipal("nocolon"); err == nil {
		t.Fatal("a principal without a type")
	}
}

// FuzzForwardCodec: any bytes decode to an error or to something that
// encodes back the same, never a panic.
func FuzzForwardCodec(f *testing.F) {
	f.Add(AppendForwarded(nil, Forwarded{Stream: 1, Seq: 1, ClientAddr: "a:1", Key: 3, Version: 12, Body: []byte("x")}))
	f.Add(AppendForwardAnswer(nil, ForwardAnswer{Groups: map[string][]int32{"a": {1}}, Body: []byte("y")}))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fw, err := DecodeForwarded(b); err == nil {
			if !bytes.Equal(AppendForwarded(nil, fw), b) {
				t.Fatalf("request %x does not encode back", b)
			}
		}
		if a, err := DecodeForwardAnswer(b); err == nil {
			back, err := DecodeForwardAnswer(AppendForwardAnswer(nil, a))
			if err != nil || len(back.Groups) != len(a.Groups) || !bytes.Equal(back.Body, a.Body) {
				t.Fatalf("answer %x does not decode back: %v", b, err)
			}
		}
	})
}

// TestForwardedBeforeAnyGroup: a member that serves no replication group
// yet (just restarted) closes a forwarded request's connection instead of
// answering from a catalog it does not have (it crashed on a nil broker).
func TestForwardedBeforeAnyGroup(t *testing.T) {
	s := NewServer(Options{})
	produce := kmsg.NewPtrProduceRequest()
	produce.SetVersion(9)
	produce.Acks, produce.TimeoutMillis = -1, 1000
	topic := kmsg.NewProduceRequestTopic()
	topic.Topic = "t"
	produce.Topics = append(produce.Topics, topic)
	ans, err := s.ServeForwarded(context.Background(), 21, Forwarded{Stream: 1, Seq: 1, ClientAddr: "127.0.0.1:5000", Key: 0, Version: 9,
		Body: produce.AppendTo(nil)})
	if err != nil || !ans.Close {
		t.Fatalf("a produce before any group: %+v %v", ans, err)
	}
}
