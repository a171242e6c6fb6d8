package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"strings"
	"testing"
)

// batchEntry encodes one message of a batch body as clients do.
func batchEntry(flag int32, body, props string) []byte {
	be := binary.BigEndian
	n := 20 + len(body) + 2 + len(props)
	b := be.AppendUint32(nil, uint32(n))
	b = be.AppendUint32(b, 0)
	b = be.AppendUint32(b, 0)
	b = be.AppendUint32(b, uint32(flag))
	b = be.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	b = be.AppendUint16(b, uint16(len(props)))
	return append(b, props...)
}

func TestDecodeBatch(t *testing.T) {
	props := string(AppendProperties(nil, []Property{{"TAGS", "A"}, {"k", "v"}}))
	b := append(batchEntry(3, "one", props), batchEntry(0, "", "")...)
	msgs, err := DecodeBatch(b)
	if err != nil || len(msgs) != 2 || msgs[0].Flag != 3 || string(msgs[0].Body) != "one" {
		t.Fatalf("%+v %v", msgs, err)
	}
	if p := ParseProperties(msgs[0].Properties); len(p) != 2 || p[0] != (Property{"TAGS", "A"}) {
		t.Fatalf("properties %+v", p)
	}
}

func TestStoredV1Layout(t *testing.T) {
	m := &StoredMessage{QueueID: 3, Flag: 7, QueueOffset: 42, PhysicalOffset: 99, BornTimestamp: 1, BornHost: "10.0.0.1:5000",
		StoreTimestamp: 2, StoreHost: "[::1]:9876", ReconsumeTimes: 1, Body: []byte("hello"), Topic: "t",
		Properties: AppendProperties(nil, []Property{{"a", "b"}})}
	b := AppendStoredV1(nil, m)
	be := binary.BigEndian
	if int(be.Uint32(b)) != len(b) || be.Uint32(b[4:]) != MagicV1 || be.Uint32(b[8:]) != crc32.ChecksumIEEE(m.Body)&0x7FFFFFFF {
		t.Fatal("size, magic or body crc")
	}
	if be.Uint64(b[20:]) != 42 || be.Uint64(b[28:]) != 99 {
		t.Fatal("queue or physical offset")
	}
	if sys := be.Uint32(b[36:]); sys&SysFlagStoreHostV6 == 0 || sys&SysFlagBornHostV6 != 0 {
		t.Fatalf("sysflag %x", sys)
	}
	id := OffsetMessageID("10.0.0.1:5000", 1<<40|5)
	if len(id) != 32 {
		t.Fatalf("id %s", id)
	}
	if pos, err := ParseOffsetMessageID(id); err != nil || pos != 1<<40|5 {
		t.Fatalf("parsed %d %v", pos, err)
	}
}

// FuzzDecodeBatch: arbitrary batch bodies never panic and decoded messages
// lie within the input.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(batchEntry(1, "x", "a\x01b\x02"))
	f.Add([]byte{0, 0, 0, 22})
	f.Fuzz(func(t *testing.T, b []byte) {
		msgs, err := DecodeBatch(b)
		if err != nil {
			return
		}
		n := 0
		for _, m := range msgs {
			n += 22 + len(m.Body) + len(m.Properties)
			_ = ParseProperties(m.Properties)
		}
		if n > len(b) {
			t.Fatalf("messages cover %d of %d bytes", n, len(b))
		}
	})
}

func TestAppendQueueMap(t *testing.T) {
	got := string(AppendQueueMap(nil, []QueueEntry{{Topic: "t", BrokerName: "b", QueueID: 1, Value: []byte("5")},
		{Topic: `q"x`, BrokerName: "b", QueueID: 0, Value: []byte(`{"a":1}`)}}))
	want := `{{"brokerName":"b","queueId":1,"topic":"t"}:5,{"brokerName":"b","queueId":0,"topic":"q\"x"}:{"a":1}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestMessageIDPrefix(t *testing.T) {
	for _, host := range []string{"127.0.0.1:9876", "10.1.2.3:10911", "[::1]:9876"} {
		for _, pos := range []int64{0, 1, 1<<40 | 77, -1} {
			if got, want := OffsetMessageIDPrefix(host).ID(pos), OffsetMessageIDSlow(host, pos); got != want {
				t.Fatalf("%s %d: %s, want %s", host, pos, got, want)
			}
			if back, err := ParseOffsetMessageID(OffsetMessageID(host, pos)); err != nil || back != pos {
				t.Fatalf("%s %d: parsed back %d %v", host, pos, back, err)
			}
		}
	}
}

// OffsetMessageIDSlow is the id written the obvious way.
func OffsetMessageIDSlow(host string, pos int64) string {
	b, _ := appendHost(nil, host)
	b = binary.BigEndian.AppendUint64(b, uint64(pos))
	return strings.ToUpper(hex.EncodeToString(b))
}

// TestAppendHost: IPv4 hosts (also IPv4-mapped IPv6) take 4 bytes, IPv6
// 16, each followed by the port; what does not parse is 127.0.0.1.
func TestAppendHost(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []byte
		v6   bool
	}{
		{"10.1.2.3:10911", []byte{10, 1, 2, 3, 0, 0, 0x2a, 0x9f}, false},
		{"[::ffff:10.1.2.3]:80", []byte{10, 1, 2, 3, 0, 0, 0, 80}, false},
		{"[2001:db8::1]:9", append([]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 0, 0, 0, 9), true},
		{"broker-a:10911", []byte{127, 0, 0, 1, 0, 0, 0x2a, 0x9f}, false},
		{"", []byte{127, 0, 0, 1, 0, 0, 0, 0}, false},
	} {
		got, v6 := appendHost(nil, c.in)
		if !bytes.Equal(got, c.want) || v6 != c.v6 {
			t.Errorf("%q: % x (v6 %v), want % x (v6 %v)", c.in, got, v6, c.want, c.v6)
		}
	}
}
