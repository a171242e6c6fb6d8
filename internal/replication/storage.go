package replication

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// logStorage is raft.Storage over the engine's commit log: the group's
// Raft log is the log itself. LastIndex is the last entry Raft told this
// node to store (stable), which on a leader may trail records already
// written and not yet proposed.
type logStorage struct {
	node   model.NodeID // this node (what a snapshot it makes names)
	engine *storage.Engine
	state  *stateFile
	stable atomic.Uint64
	recent recentEntries // on the Raft goroutine, as Entries is called
}

// InitialState returns the persisted hard state and membership.
func (s *logStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	st := s.state.load()
	hs := &pb.HardState{Term: new(st.Term), Vote: new(st.Vote), Commit: new(st.Commit)}
	cs := &pb.ConfState{Voters: st.Voters, Learners: st.Learners}
	return hs, cs, nil
}

// Entries returns entries [lo, hi) of at most maxSize bytes (at least one).
func (s *logStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if last := s.stable.Load(); hi > last+1 {
		return nil, raft.ErrUnavailable
	}
	if first := s.firstIndex(); lo < first {
		return nil, raft.ErrCompacted
	}
	if ents, ok := s.recent.get(lo, hi, maxSize); ok {
		return ents, nil
	}
	max := int(min(maxSize, 1<<30))
	ents, err := s.engine.Entries(model.Index(lo), model.Index(hi), max)
	if errors.Is(err, commitlog.ErrCompacted) {
		return nil, raft.ErrCompacted
	}
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Entry, len(ents))
	for i, e := range ents {
		out[i] = entryOf(e)
	}
	return out, nil
}

// entryOf turns a stored record into the Raft entry it was appended as.
func entryOf(e commitlog.IndexedEntry) *pb.Entry {
	ent := &pb.Entry{Index: new(uint64(e.Index)), Term: new(uint64(e.Term))}
	if typ, data, ok := storage.RaftEntryOf(e.Data); ok {
		ent.Type = pb.EntryType(typ).Enum()
		if len(data) > 0 {
			ent.Data = data
		}
		return ent
	}
	ent.Type = pb.EntryNormal.Enum()
	ent.Data = e.Data
	return ent
}

// recordOf returns the bytes to store for a Raft entry: our record itself,
// or a Raft entry record for the entries Raft makes.
func recordOf(ent *pb.Entry) []byte {
	if ent.GetType() == pb.EntryNormal && len(ent.Data) > 0 {
		return ent.Data
	}
	return storage.RaftEntryRecord(model.Index(ent.GetIndex()), model.Term(ent.GetTerm()), byte(ent.GetType()), ent.Data)
}

// Term returns the term of entry i.
func (s *logStorage) Term(i uint64) (uint64, error) {
	if i == 0 {
		return 0, nil
	}
	if i > s.stable.Load() {
		return 0, raft.ErrUnavailable
	}
	if i < s.firstIndex() {
		return 0, raft.ErrCompacted
	}
	t, err := s.engine.TermAt(model.Index(i))
	if errors.Is(err, commitlog.ErrCompacted) {
		return 0, raft.ErrCompacted
	}
	return uint64(t), err
}

// LastIndex returns the last stable index.
func (s *logStorage) LastIndex() (uint64, error) { return s.stable.Load(), nil }

// FirstIndex returns the first index served.
func (s *logStorage) FirstIndex() (uint64, error) { return s.firstIndex(), nil }

func (s *logStorage) firstIndex() uint64 {
	if f := s.engine.FirstIndex(); f > 0 {
		return uint64(f)
	}
	return s.stable.Load() + 1
}

// Snapshot names what a replica that needs records the log no longer holds
// installs instead: an image of this (the leader's) engine at its commit
// index, which the replica fetches from this node out of band
// (Config.FetchSnapshot) — the snapshot Raft sends carries no data but
// where to fetch it.
func (s *logStorage) Snapshot() (*pb.Snapshot, error) {
	i := uint64(s.engine.CommitIndex())
	if i == 0 || s.node == 0 {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	t, err := s.engine.TermAt(model.Index(i))
	if err != nil {
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
	data, err := json.Marshal(snapshotSource{Node: s.node})
	if err != nil {
		return nil, err
	}
	st := s.state.load()
	return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{Index: new(i), Term: new(uint64(t)),
		ConfState: &pb.ConfState{Voters: st.Voters, Learners: st.Learners}}}, nil
}

// snapshotSource is a snapshot's data: the node whose image to fetch.
type snapshotSource struct {
	Node model.NodeID `json:"node"`
}

// persistedState is the small file beside the log holding what Raft needs
// besides the log: its hard state and the group's membership.
type persistedState struct {
	Term     uint64   `json:"term"`
	Vote     uint64   `json:"vote"`
	Commit   uint64   `json:"commit"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
}

// stateFile persists persistedState atomically (write, fsync, rename,
// fsync the directory).
type stateFile struct {
	path string
	cur  persistedState
}

// openState reads the state file in dir, or starts one with voters.
func openState(dir string, voters, learners []uint64) (*stateFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft state dir: %w", err)
	}
	f := &stateFile{path: filepath.Join(dir, "state.json")}
	b, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		f.cur = persistedState{Voters: voters, Learners: learners}
		return f, f.save(f.cur)
	case err != nil:
		return nil, fmt.Errorf("raft state: %w", err)
	}
	if err := json.Unmarshal(b, &f.cur); err != nil {
		return nil, fmt.Errorf("%w: raft state %s: %w", model.ErrCorruptRecord, f.path, err)
	}
	return f, nil
}

func (f *stateFile) load() persistedState { return f.cur }

// save writes st durably.
func (f *stateFile) save(st persistedState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := f.path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		w.Close()
		return fmt.Errorf("raft state: %w", err)
	}
	if err := w.Sync(); err != nil {
		w.Close()
		return fmt.Errorf("raft state: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	if err := os.Rename(tmp, f.path); err != nil {
		return fmt.Errorf("raft state: %w", err)
	}
	if d, err := os.Open(filepath.Dir(f.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	f.cur = st
	return nil
}
