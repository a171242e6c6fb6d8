package broker

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

func sampleMessage() *model.Message {
	return &model.Message{Key: []byte("k1"), Tags: "TagA", Producer: "p", BornTime: 1700000000000, Flags: 3,
		Headers: []model.Header{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "b", Value: nil}},
		Body:    []byte("hello"), UserFlag: -7, BornHost: "10.1.2.3:5555", ReconsumeTimes: 2}
}

func TestMessageRoundTrip(t *testing.T) {
	m := sampleMessage()
	got, err := DecodeMessage(EncodeMessage(nil, m))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Key, m.Key) || got.Tags != m.Tags || got.BornTime != m.BornTime || !bytes.Equal(got.Body, m.Body) ||
		len(got.Headers) != 3 || got.Headers[1].Key != "a" || string(got.Headers[1].Value) != "2" ||
		got.UserFlag != -7 || got.BornHost != m.BornHost || got.ReconsumeTimes != 2 {
		t.Fatalf("round trip %+v", got)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	f.Add(EncodeMessage(nil, sampleMessage()))
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		again := EncodeMessage(nil, &m)
		m2, err := DecodeMessage(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, EncodeMessage(nil, &m2)) || !reflect.DeepEqual(len(m.Headers), len(m2.Headers)) {
			t.Fatal("unstable encoding")
		}
	})
}
