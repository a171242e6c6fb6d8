package protocol

import (
	"slices"
	"testing"
)

func TestDecodeBatchAckBody(t *testing.T) {
	// Bits 0, 2 and 9 above 100: bytes 0x05 0x02, base64 "BQI=".
	body := `{"acks":[{"b":"BQI=","c":"g","it":60000,"pt":1700000000000,"q":1,"r":"0","rq":0,"so":100,"t":"topic"},` +
		`{"bitSet":[1],"consumerGroup":"g","invisibleTime":5,"popTime":7,"queueId":2,"startOffset":3,"topic":"topic"}],"brokerName":"b"}`
	bn, acks, err := DecodeBatchAckBody([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if bn != "b" || len(acks) != 2 {
		t.Fatalf("%q %v", bn, acks)
	}
	a := acks[0]
	if a.ConsumerGroup != "g" || a.Topic != "topic" || a.QueueID != 1 || a.PopTime != 1700000000000 || a.InvisibleTime != 60000 ||
		!slices.Equal(a.Offsets, []int64{100, 102, 109}) {
		t.Fatalf("%+v", a)
	}
	if b := acks[1]; b.QueueID != 2 || b.PopTime != 7 || b.InvisibleTime != 5 || !slices.Equal(b.Offsets, []int64{3}) {
		t.Fatalf("%+v", b)
	}
	for _, bad := range []string{`{`, `{"acks":[{"b":"!!"}]}`, `{"acks":[{"so":-1,"b":"AQ=="}]}`, `{"acks":[{"b":{}}]}`} {
		if _, _, err := DecodeBatchAckBody([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func FuzzDecodeBatchAckBody(f *testing.F) {
	f.Add([]byte(`{"acks":[{"b":"BQI=","c":"g","it":60000,"pt":1,"q":1,"so":100,"t":"t"}]}`))
	f.Add([]byte(`{"acks":[{"bitSet":[1,255,-1],"startOffset":9}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		_, acks, err := DecodeBatchAckBody(body)
		if err != nil {
			return
		}
		for _, a := range acks {
			if len(a.Offsets) > MaxBatchAckBits {
				t.Fatalf("%d offsets", len(a.Offsets))
			}
			for i, o := range a.Offsets {
				if o < a.StartOffset || (i > 0 && o <= a.Offsets[i-1]) {
					t.Fatalf("offsets %v from %d", a.Offsets, a.StartOffset)
				}
			}
		}
	})
}
