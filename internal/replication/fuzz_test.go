package replication

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// FuzzReadFrame: whatever a peer sends, frames decode or fail cleanly.
func FuzzReadFrame(f *testing.F) {
	m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Term: new(uint64(3)),
		Entries: []*pb.Entry{{Index: new(uint64(5)), Term: new(uint64(3)), Data: []byte("record")}}}
	b, _ := proto.Marshal(m)
	f.Add(appendFrame(nil, 0, b))
	enc, _ := appendMessage(nil, frame{group: 2, msg: m})
	f.Add(append(enc, enc...))
	f.Add(appendFrame(nil, keepaliveGroup, nil))
	f.Add(appendFrame(nil, callGroup, encodeCall(callRequest, 3, 1, []byte("x"))))
	f.Add([]byte{0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var scratch []byte
		for {
			_, msg, _, err := readFrame(r, &scratch)
			if err != nil {
				return
			}
			if msg != nil {
				_ = msg.GetEntries()
			}
		}
	})
}

// FuzzHello: a connection's first bytes never crash the accepting side.
func FuzzHello(f *testing.F) {
	var good bytes.Buffer
	good.WriteString(helloMagic)
	good.Write([]byte{0, 0, 0, 1, 0, 1, 'c'})
	f.Add(good.Bytes())
	f.Add([]byte(helloMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _ = decodeHello(bytes.NewReader(data))
	})
}

// FuzzRaftEntryRecord: Raft entry records round-trip, and any bytes are
// either one or not.
func FuzzRaftEntryRecord(f *testing.F) {
	f.Add(uint64(7), uint64(2), byte(pb.EntryConfChangeV2), []byte("cc"))
	f.Add(uint64(1), uint64(1), byte(pb.EntryNormal), []byte(nil))
	f.Fuzz(func(t *testing.T, index, term uint64, typ byte, data []byte) {
		rec := storage.RaftEntryRecord(model.Index(index), model.Term(term), typ, data)
		gotTyp, gotData, ok := storage.RaftEntryOf(rec)
		if !ok || gotTyp != typ || !bytes.Equal(gotData, data) {
			t.Fatalf("round trip: %v %d %q", ok, gotTyp, gotData)
		}
		_, _, _ = storage.RaftEntryOf(data)
	})
}

// FuzzStateFile: a damaged state file is refused, never half-read.
func FuzzStateFile(f *testing.F) {
	good, _ := json.Marshal(persistedState{Term: 3, Vote: 1, Commit: 9, Voters: []uint64{1, 2, 3}})
	f.Add(good)
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "state.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _ = openState(dir, []uint64{1}, nil)
	})
}

// TestFramesRoundTrip: messages encoded one after another come back whole
// through one reader, and what an earlier one holds survives the reader
// reusing its buffer for the next.
func TestFramesRoundTrip(t *testing.T) {
	var buf []byte
	var sent []*pb.Message
	for i := range 3 {
		m := &pb.Message{Type: pb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)),
			Entries: []*pb.Entry{{Index: new(uint64(i + 1)), Term: new(uint64(1)), Data: bytes.Repeat([]byte{byte('a' + i)}, 1000*(3-i))}}}
		var err error
		if buf, err = appendMessage(buf, frame{group: 7, msg: m}); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m)
	}
	r := bytes.NewReader(buf)
	var scratch []byte
	var got []*pb.Message
	for range sent {
		g, m, _, err := readFrame(r, &scratch)
		if err != nil || g != 7 {
			t.Fatalf("frame: group %d, %v", g, err)
		}
		got = append(got, m)
	}
	for i := range sent {
		if !proto.Equal(sent[i], got[i]) {
			t.Fatalf("message %d came back changed", i)
		}
	}
}
