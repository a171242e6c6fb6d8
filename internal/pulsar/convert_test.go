package pulsar

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// batchPayload builds a batch payload as pulsar-client-go does.
func batchPayload(n int) []byte {
	var b []byte
	for i := range n {
		smm := &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i)), EventTime: proto.Uint64(uint64(100 + i)),
			Properties: []*pulsarpb.KeyValue{{Key: proto.String("i"), Value: proto.String(fmt.Sprint(i))}}}
		v := []byte(fmt.Sprint("v", i))
		smm.PayloadSize = proto.Int32(int32(len(v)))
		md, _ := proto.Marshal(smm)
		b = binary.BigEndian.AppendUint32(b, uint32(len(md)))
		b = append(append(b, md...), v...)
	}
	return b
}

// TestAppendSingle: the hand-written SingleMessageMetadata encoding is
// what protobuf decodes, field for field.
func TestAppendSingle(t *testing.T) {
	for name, m := range map[string]singleMeta{
		"empty": {},
		"full": {key: []byte("key"), hasKey: true, eventTime: 1 << 40, hasEventTime: true, nullValue: true, tags: "TagA",
			headers: []kbatch.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: HeaderOrderingKey, Value: []byte("ok")},
				{Key: broker.HeaderTimerDeliverMs, Value: []byte("5")}, {Key: "b", Value: []byte{}}}},
		"empty key": {key: []byte{}, hasKey: true},
	} {
		payload := []byte("payload")
		b := appendSingle(nil, &m, payload)
		n := binary.BigEndian.Uint32(b)
		var got pulsarpb.SingleMessageMetadata
		if err := proto.Unmarshal(b[4:4+n], &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if rest := b[4+n:]; string(rest) != "payload" || got.GetPayloadSize() != int32(len(payload)) {
			t.Fatalf("%s: payload %q, size %d", name, rest, got.GetPayloadSize())
		}
		var props []string
		for _, kv := range got.GetProperties() {
			props = append(props, kv.GetKey()+"="+kv.GetValue())
		}
		want := map[string]string{"empty": "[] false  false 0 false ", "full": "[a=1 b= rocketmq.TAGS=TagA] true key true 1099511627776 true ok",
			"empty key": "[] true  false 0 false "}[name]
		if g := fmt.Sprint(props, " ", got.PartitionKey != nil, " ", got.GetPartitionKey(), " ", got.EventTime != nil, " ", got.GetEventTime(), " ",
			got.GetNullValue(), " ", string(got.GetOrderingKey())); g != want {
			t.Fatalf("%s: %s, want %s", name, g, want)
		}
	}
}

// TestDecodeSend: batched and single messages, plain and compressed with
// each codec the clients write, become records with keys, properties and
// event times; encrypted and chunked messages are refused.
func TestDecodeSend(t *testing.T) {
	plain := batchPayload(3)
	lz := make([]byte, lz4.CompressBlockBound(len(plain)))
	n, err := lz4.CompressBlock(plain, lz, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		codec pulsarpb.CompressionType
		body  []byte
	}{
		"none":   {pulsarpb.CompressionType_NONE, plain},
		"lz4":    {pulsarpb.CompressionType_LZ4, lz[:n]},
		"snappy": {pulsarpb.CompressionType_SNAPPY, snappy.Encode(nil, plain)},
	} {
		md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(50),
			NumMessagesInBatch: proto.Int32(3), Compression: c.codec.Enum(), UncompressedSize: proto.Uint32(uint32(len(plain)))}
		recs, _, err := DecodeSend(md, c.body)
		if err != nil || len(recs) != 3 {
			t.Fatalf("%s: %d records, %v", name, len(recs), err)
		}
		for i, r := range recs {
			if string(r.Key) != fmt.Sprint("k", i) || string(r.Value) != fmt.Sprint("v", i) || r.Timestamp != int64(100+i) ||
				len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i) {
				t.Fatalf("%s: record %d: %+v", name, i, r)
			}
		}
	}
	single := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(50),
		OrderingKey: []byte("ok"), DeliverAtTime: proto.Int64(999)}
	recs, noEvent, err := DecodeSend(single, []byte("body"))
	if err != nil || len(recs) != 1 || string(recs[0].Key) != "ok" || recs[0].Timestamp != 50 || len(recs[0].Headers) != 1 ||
		len(noEvent) != 1 || noEvent[0] != 1 {
		t.Fatalf("single: %+v %v", recs, err)
	}
	for name, md := range map[string]*pulsarpb.MessageMetadata{
		"encrypted": {EncryptionKeys: []*pulsarpb.EncryptionKeys{{Key: proto.String("k"), Value: []byte("x")}}},
		"chunked":   {NumChunksFromMsg: proto.Int32(3)},
		"short":     {NumMessagesInBatch: proto.Int32(5)},
	} {
		if _, _, err := DecodeSend(md, plain); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzDecodeSend: no payload or metadata makes the SEND decoder panic.
func FuzzDecodeSend(f *testing.F) {
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(50),
		NumMessagesInBatch: proto.Int32(3)}
	mdb, _ := proto.Marshal(md)
	f.Add(mdb, batchPayload(3))
	f.Add(mdb, binary.BigEndian.AppendUint32(nil, 1<<30))
	f.Fuzz(func(t *testing.T, mdBytes, payload []byte) {
		var md pulsarpb.MessageMetadata
		if proto.Unmarshal(mdBytes, &md) != nil {
			return
		}
		_, _, _ = DecodeSend(&md, payload)
	})
}

// FuzzParseSingle: the hand-written SingleMessageMetadata decoder agrees
// with protobuf's on everything protobuf accepts, and never panics.
func FuzzParseSingle(f *testing.F) {
	b := batchPayload(1)
	f.Add(b[4 : 4+binary.BigEndian.Uint32(b)])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m sentMessage
		size, err := parseSingle(b, &m)
		var want pulsarpb.SingleMessageMetadata
		if proto.Unmarshal(b, &want) != nil {
			return
		}
		if err != nil {
			t.Fatalf("protobuf decodes %x, parseSingle: %v", b, err)
		}
		var props []string
		for _, kv := range m.props {
			props = append(props, kv.Key+"="+string(kv.Value))
		}
		var wantProps []string
		for _, kv := range want.GetProperties() {
			wantProps = append(wantProps, kv.GetKey()+"="+kv.GetValue())
		}
		if size != want.GetPayloadSize() || string(m.partitionKey) != want.GetPartitionKey() || m.eventTime != want.GetEventTime() ||
			m.keyB64 != want.GetPartitionKeyB64Encoded() || string(m.orderingKey) != string(want.GetOrderingKey()) ||
			m.nullValue != want.GetNullValue() || fmt.Sprint(props) != fmt.Sprint(wantProps) {
			t.Fatalf("%x: parseSingle %d %+v, protobuf %v", b, size, m, &want)
		}
	})
}

// TestCompressEntry: an entry of a compressed batch goes compressed with
// the batch's codec (gzip as ZLIB) and decompresses to what it was.
func TestCompressEntry(t *testing.T) {
	s := NewServer(nil, Options{})
	plain := batchPayload(100)
	for codec, want := range map[int]pulsarpb.CompressionType{kbatch.CodecNone: pulsarpb.CompressionType_NONE,
		kbatch.CodecGzip: pulsarpb.CompressionType_ZLIB, kbatch.CodecSnappy: pulsarpb.CompressionType_SNAPPY,
		kbatch.CodecLZ4: pulsarpb.CompressionType_LZ4, kbatch.CodecZstd: pulsarpb.CompressionType_ZSTD} {
		e := entry{payload: plain}
		s.compressEntry(&e, codec)
		if e.codec != want || (want != pulsarpb.CompressionType_NONE) != (e.uncompressed == len(plain) && len(e.payload) < len(plain)) {
			t.Fatalf("codec %d: %v, %d of %d bytes", codec, e.codec, len(e.payload), e.uncompressed)
		}
		md := &pulsarpb.MessageMetadata{Compression: e.codec.Enum(), UncompressedSize: proto.Uint32(uint32(e.uncompressed))}
		got, err := decompress(md, e.payload)
		if err != nil || string(got) != string(plain) {
			t.Fatalf("codec %d: %v", codec, err)
		}
	}
}
