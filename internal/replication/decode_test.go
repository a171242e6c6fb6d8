package replication

import (
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// sampleMessages are messages as members send them, and ones the fast
// path leaves to proto.Unmarshal.
func sampleMessages() []*pb.Message {
	return []*pb.Message{
		{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), LogTerm: new(uint64(3)),
			Index: new(uint64(4)), Commit: new(uint64(4)), Entries: []*pb.Entry{
				{Index: new(uint64(5)), Term: new(uint64(3)), Data: []byte("record")},
				{Index: new(uint64(6)), Term: new(uint64(3)), Type: pb.EntryConfChangeV2.Enum(), Data: []byte{}},
				{}}},
		{Type: pb.MsgAppResp.Enum(), To: new(uint64(1)), From: new(uint64(2)), Term: new(uint64(3)), Index: new(uint64(6)),
			Reject: new(true), RejectHint: new(uint64(4)), LogTerm: new(uint64(2))},
		{Type: pb.MsgHeartbeat.Enum(), Commit: new(uint64(9)), Context: []byte("ctx")},
		{Type: pb.MsgVote.Enum(), Vote: new(uint64(0)), Context: []byte{}},
		{Type: pb.MsgSnap.Enum(), Snapshot: &pb.Snapshot{Data: []byte("image"), Metadata: &pb.SnapshotMetadata{Index: new(uint64(7))}}},
		{Type: pb.MsgStorageAppend.Enum(), Responses: []*pb.Message{{Type: pb.MsgStorageAppendResp.Enum()}}},
		{},
	}
}

// TestDecodeMessageAliases: decoded messages equal proto.Unmarshal's, and
// entries' data share the frame's bytes instead of copies.
func TestDecodeMessageAliases(t *testing.T) {
	for i, want := range sampleMessages() {
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMessage(b)
		if err != nil || !proto.Equal(got, want) {
			t.Fatalf("message %d: got %v (%v), want %v", i, got, err, want)
		}
	}
	b, _ := proto.Marshal(sampleMessages()[0])
	m, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	data := m.GetEntries()[0].GetData()
	data[0] = 'R'
	if got, _ := decodeMessage(b); string(got.GetEntries()[0].GetData()) != "Record" {
		t.Fatal("entry data is a copy, not a slice of the frame")
	}
}

// FuzzDecodeMessage: whatever the bytes, decodeMessage fails when
// proto.Unmarshal fails and gives what it gives otherwise.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x08, 0xff, 0x01})             // a message type past the known ones
	f.Add([]byte{0x3a, 0x02, 0x08, 0x07})       // an entry type past the known ones
	f.Add([]byte{0x08, 0x80, 0x80, 0x80, 0x80}) // a truncated varint
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &pb.Message{}
		werr := proto.Unmarshal(b, want)
		got, err := decodeMessage(append([]byte(nil), b...))
		switch {
		case (werr == nil) != (err == nil):
			t.Fatalf("decodeMessage error %v, proto.Unmarshal's %v", err, werr)
		case err == nil && !proto.Equal(got, want):
			t.Fatalf("decodeMessage %v, proto.Unmarshal %v", got, want)
		}
	})
}

// BenchmarkDecodeMessage: a MsgApp of 64 entries of 1 KiB, decoded into
// its own buffer (what readFrame does) and with proto.Unmarshal.
func BenchmarkDecodeMessage(b *testing.B) {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)), Index: new(uint64(9))}
	for i := range 64 {
		m.Entries = append(m.Entries, &pb.Entry{Index: new(uint64(10 + i)), Term: new(uint64(3)), Data: make([]byte, 1024)})
	}
	frame, _ := proto.Marshal(m)
	b.Run("aliasing", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		for b.Loop() {
			body := make([]byte, len(frame))
			copy(body, frame) // the read from the connection
			if _, err := decodeMessage(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(frame)))
		body := make([]byte, len(frame))
		for b.Loop() {
			copy(body, frame) // the read into the reused buffer
			if err := proto.Unmarshal(body, &pb.Message{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
