package pulsar

import (
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

func sendCommand() *pulsarpb.BaseCommand {
	return &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(),
		Send: &pulsarpb.CommandSend{ProducerId: proto.Uint64(7), SequenceId: proto.Uint64(42), NumMessages: proto.Int32(1)}}
}

// Frames come out of the decoder as the encoder wrote them: a simple
// command, a SEND with metadata and payload, a MESSAGE with broker entry
// metadata.
func TestFrameRoundTrip(t *testing.T) {
	ping := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}}
	b, err := AppendCommand(nil, ping)
	if err != nil {
		t.Fatal(err)
	}
	if int(binary.BigEndian.Uint32(b)) != len(b)-4 {
		t.Fatalf("total size %d for %d bytes", binary.BigEndian.Uint32(b), len(b))
	}
	f, err := DecodeFrame(b[4:])
	if err != nil || f.Command.GetType() != pulsarpb.BaseCommand_PING || f.Metadata != nil {
		t.Fatalf("ping: %+v %v", f, err)
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(42), PublishTime: proto.Uint64(1000),
		PartitionKey: proto.String("key")}
	for _, entry := range []*pulsarpb.BrokerEntryMetadata{nil, {BrokerTimestamp: proto.Uint64(5), Index: proto.Uint64(9)}} {
		b, err := AppendPayloadCommand(nil, sendCommand(), entry, md, []byte("hello"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := DecodeFrame(b[4:])
		if err != nil {
			t.Fatal(err)
		}
		if f.Command.GetSend().GetSequenceId() != 42 || f.Metadata.GetPartitionKey() != "key" || string(f.Payload) != "hello" || !f.ChecksumSeen {
			t.Fatalf("payload frame: %+v", f)
		}
		if entry != nil && f.BrokerEntry.GetIndex() != 9 {
			t.Fatalf("broker entry metadata: %+v", f.BrokerEntry)
		}
		b[len(b)-1] ^= 0xff
		if _, err := DecodeFrame(b[4:]); !errors.Is(err, ErrChecksum) {
			t.Fatalf("a corrupted payload: %v", err)
		}
	}
	for _, bad := range [][]byte{nil, {0, 0, 0, 9}, {0, 0, 0, 1, 0xff}} {
		if _, err := DecodeFrame(bad); !errors.Is(err, ErrBadFrame) {
			t.Fatalf("%x: %v", bad, err)
		}
	}
}

// FuzzDecodeFrame: no input crashes the frame decoder, and a frame it
// decodes encodes back to one that decodes the same.
func FuzzDecodeFrame(f *testing.F) {
	ping, _ := AppendCommand(nil, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}})
	f.Add(ping[4:])
	send, _ := AppendPayloadCommand(nil, sendCommand(), &pulsarpb.BrokerEntryMetadata{Index: proto.Uint64(1)},
		&pulsarpb.MessageMetadata{ProducerName: proto.String("p"), SequenceId: proto.Uint64(1), PublishTime: proto.Uint64(1)}, []byte("x"))
	f.Add(send[4:])
	f.Add([]byte{0, 0, 0, 0, 0x0e, 0x01, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		var out []byte
		if fr.Metadata == nil {
			out, err = AppendCommand(nil, fr.Command)
		} else {
			out, err = AppendPayloadCommand(nil, fr.Command, fr.BrokerEntry, fr.Metadata, fr.Payload)
		}
		if err != nil {
			return // a proto2 message missing required fields does not encode
		}
		again, err := DecodeFrame(out[4:])
		if err != nil || again.Command.GetType() != fr.Command.GetType() || string(again.Payload) != string(fr.Payload) {
			t.Fatalf("re-encoded frame: %v", err)
		}
	})
}
