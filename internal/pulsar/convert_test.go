package pulsar

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/klauspost/compress/snappy"
	"github.com/pierrec/lz4/v4"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// batchPayload builds a batch payload as pulsar-client-go does.
func batchPayload(n int) []byte {
	var b []byte
	for i := range n {
		smm := &pulsarpb.SingleMessageMetadata{PartitionKey: proto.String(fmt.Sprint("k", i)), EventTime: proto.Uint64(uint64(100 + i)),
			Properties: []*pulsarpb.KeyValue{{Key: proto.String("i"), Value: proto.String(fmt.Sprint(i))}}}
		b = appendSingle(b, smm, []byte(fmt.Sprint("v", i)))
	}
	return b
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
