package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// An engine as one replica of a replication group (Config.Replicated).
// The group's Raft log is the commit log itself:
//
//   - On the leader, appends work as on a single node — offsets assigned
//     under the log lock, records written, indexes updated — while SetLeader
//     keeps the log open for writing; every record written is handed to
//     Config.OnWritten in index order, which the group proposes to Raft at
//     the index and term the record already carries. The append returns
//     once Commit reached its last record (a majority holds it), or fails
//     with model.ErrNotLeader when leadership ends first or the record was
//     cut.
//   - On every replica the group writes the entries Raft tells it to store
//     with AppendEntries (skipping the leader's own, already written) and
//     cuts divergent tails with TruncateAfter; Commit makes records visible
//     to readers and applies in place what only committed records may
//     change (queue starts, compaction results).
//   - Raft's own entries (a new leader's empty entry, configuration
//     changes) are control records of queue 0 (RaftEntryRecord).
//   - A checkpoint is taken only at a point where everything written is
//     committed: appends pause (briefly) until the commit index reaches
//     the log's end, so no checkpoint ever reflects a record a truncation
//     could cut.

// opRaft is the control op of a Raft entry record: op | type u8 | data.
const opRaft = 6

// RaftEntryRecord encodes a Raft entry that carries none of our records as
// a control record of queue 0 with the entry's index and term.
func RaftEntryRecord(index model.Index, term model.Term, typ byte, data []byte) []byte {
	payload := make([]byte, 2+len(data))
	payload[0], payload[1] = opRaft, typ
	copy(payload[2:], data)
	// A fixed time keeps the record identical on every replica.
	h := commitlog.Header{Format: model.FormatInternal, Flags: commitlog.FlagControl, Queue: engineQueue,
		Term: term, Index: index, Count: 1, Timestamp: 1, StoreTime: 1}
	return commitlog.AppendRecord(nil, &h, nil, payload)
}

// RaftEntryOf returns the Raft entry type and data of a record made by
// RaftEntryRecord (ok false for any other record).
func RaftEntryOf(rec []byte) (typ byte, data []byte, ok bool) {
	h, err := commitlog.DecodeHeader(rec)
	if err != nil || h.Queue != engineQueue || h.Flags&commitlog.FlagControl == 0 {
		return 0, nil, false
	}
	p := rec[commitlog.HeaderSize+int(h.KeysLen) : h.Length]
	if len(p) < 2 || p[0] != opRaft {
		return 0, nil, false
	}
	return p[1], p[2:], true
}

// inPlaceOp says whether a control payload changes state in place once
// applied (everything but queue creation, seals and Raft entries).
func inPlaceOp(payload []byte) bool {
	if len(payload) == 0 {
		return false
	}
	switch payload[0] {
	case opCreateQueue, opRaft, opSealQueue, opUnsealQueue:
		return false
	}
	return true
}

// replication is the engine's state as one replica of a group.
type replication struct {
	// pause: appends hold it shared while they write; a checkpoint holds
	// it exclusively while it waits for the commit index to reach the end.
	pause       sync.RWMutex
	mu          sync.Mutex
	changed     chan struct{} // closed and replaced when any of the below moves
	commitIndex atomic.Uint64
	leaderGen   atomic.Uint64 // raised at every change of leadership
	// held: appends wait (HoldAppends) while a membership change is stored.
	held atomic.Bool
	// handedOff: this replica handed its leadership to a member holding
	// everything it wrote (HandOff); waits for commits go on.
	handedOff   atomic.Bool
	truncations atomic.Uint64
	// termStart: the index of the first record of this replica's term
	// as leader (SetLeader).
	termStart atomic.Uint64
	// deferred: records a follower stored whose in-place effect waits for
	// their commit (under mu).
	deferred []deferredRecord
}

type deferredRecord struct {
	entry  *commitlog.Entry
	record commitlog.Record
}

// changedCh returns the channel closed at the next change.
func (r *replication) changedCh() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return r.changed
}

// broadcast wakes every waiter.
func (r *replication) broadcast() {
	r.mu.Lock()
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
	r.mu.Unlock()
}

// SetLeader opens the log for appends in term (this node leads the group)
// and returns the index of its last record; Raft has every record up to
// it, and the first append follows it.
func (e *Engine) SetLeader(term model.Term) (model.Index, error) {
	last, err := e.clog.SetWritable(term)
	if err != nil {
		return 0, err
	}
	e.repl.held.Store(false)
	e.repl.handedOff.Store(false)
	e.repl.termStart.Store(uint64(last) + 1)
	e.repl.leaderGen.Add(1)
	e.repl.broadcast()
	return last, nil
}

// appliedAsLeader says whether this replica leads and has applied every
// record stored before its term: once the commit index reaches the last of
// them, all are committed, and applied. (Raft's empty entry of the term is
// among them when the log opened after it was stored; either way a quiet
// group's new leader need not wait for an append of its own.)
func (e *Engine) appliedAsLeader() bool {
	return e.clog.Writable() && uint64(e.CommitIndex())+1 >= e.repl.termStart.Load()
}

// HoldAppends closes the log for appends while its leader stays (a
// membership change is proposed between the records): new appends wait
// until ResumeAppends opens it again in the same term (or fail with
// model.ErrNotLeader if leadership ends first), appends waiting for their
// commit keep waiting.
func (e *Engine) HoldAppends() {
	e.repl.held.Store(true)
	_, _ = e.clog.SetWritable(0)
}

// ResumeAppends opens the log again after HoldAppends and returns the
// index of its last record.
func (e *Engine) ResumeAppends(term model.Term) (model.Index, error) {
	last, err := e.clog.SetWritable(term)
	e.repl.held.Store(false)
	e.repl.broadcast()
	return last, err
}

// SetFollower closes the log for appends: appends waiting for their
// commit fail with model.ErrNotLeader (a new leader may still commit
// them; idempotent producers find out when they retry).
func (e *Engine) SetFollower() {
	_, _ = e.clog.SetWritable(0)
	e.repl.held.Store(false)
	e.repl.handedOff.Store(false)
	e.repl.leaderGen.Add(1)
	e.repl.broadcast()
}

// handOffCommitWait bounds how long appends wait for their commit after
// their leader handed the group off (HandOff).
const handOffCommitWait = time.Second

// HandOff closes the log for appends when this replica handed its
// leadership to a member that holds everything it wrote: appends waiting
// for their commit keep waiting, since the new leader commits them, for
// at most handOffCommitWait; then, or at the next change of leadership,
// they fail as after SetFollower. New appends fail at once.
func (e *Engine) HandOff() {
	_, _ = e.clog.SetWritable(0)
	e.repl.held.Store(false)
	gen := e.repl.leaderGen.Load()
	e.repl.handedOff.Store(true)
	e.repl.broadcast()
	time.AfterFunc(handOffCommitWait, func() {
		if e.repl.leaderGen.CompareAndSwap(gen, gen+1) {
			e.repl.handedOff.Store(false)
			e.repl.broadcast()
		}
	})
}

// CommitIndex returns the group's commit index as this replica knows it.
func (e *Engine) CommitIndex() model.Index { return model.Index(e.repl.commitIndex.Load()) }

// LastIndex returns the index of the last record written.
func (e *Engine) LastIndex() model.Index { return e.clog.LastIndex() }

// Commit moves the commit index to i (a record this replica stored): the
// records up to it become visible, the in-place effects of a follower's
// records up to it are applied, and appends waiting for them return.
func (e *Engine) Commit(ctx context.Context, i model.Index) error {
	if i <= e.CommitIndex() {
		return nil
	}
	end, err := e.clog.EndOf(i)
	if err != nil {
		return fmt.Errorf("commit %d: %w", i, err)
	}
	// Effects first: a checkpoint waiting for the commit index to reach
	// the end captures them. Commits come from one goroutine.
	e.repl.mu.Lock()
	n := 0
	for n < len(e.repl.deferred) && e.repl.deferred[n].entry.Index <= i {
		n++
	}
	due := slices.Clone(e.repl.deferred[:n])
	e.repl.deferred = append(e.repl.deferred[:0], e.repl.deferred[n:]...)
	e.repl.mu.Unlock()
	applyErr := e.applyInPlace(due)
	e.repl.commitIndex.Store(uint64(i))
	e.SetCommitted(end)
	e.repl.broadcast()
	return applyErr
}

// appendReplicated writes recs through a replicated log and waits for
// their commit (unless noWait).
func (e *Engine) appendReplicated(ctx context.Context, recs []*commitlog.Entry, write func() (model.LogPos, error), noWait bool) (model.LogPos, error) {
	var end model.LogPos
	var err error
	var gen, truncs uint64
	for {
		gen, truncs = e.repl.leaderGen.Load(), e.repl.truncations.Load()
		e.repl.pause.RLock()
		end, err = write()
		e.repl.pause.RUnlock()
		if !errors.Is(err, commitlog.ErrNotWritable) || !e.repl.held.Load() {
			break
		}
		// A membership change is being stored: nothing was written; wait
		// for appends to resume (or leadership to end) and write again.
		if werr := e.waitReplication(ctx, func() (bool, error) { return !e.repl.held.Load(), nil }); werr != nil {
			return end, werr
		}
	}
	if errors.Is(err, commitlog.ErrNotWritable) {
		return end, fmt.Errorf("%w: %w", model.ErrNotLeader, err)
	}
	if err != nil || noWait {
		return end, err
	}
	last := recs[len(recs)-1]
	return end, e.waitCommitted(ctx, last.Index, last.Term, gen, truncs)
}

// waitCommitted waits until record i of term t is committed. It fails with
// model.ErrNotLeader when leadership changes first (gen) or when the
// record was cut (a truncation since truncs left another record at i).
func (e *Engine) waitCommitted(ctx context.Context, i model.Index, t model.Term, gen, truncs uint64) error {
	return e.waitReplication(ctx, func() (bool, error) {
		if e.CommitIndex() >= i {
			if e.repl.truncations.Load() != truncs {
				if got, err := e.clog.Term(i); err != nil || got != t {
					return false, fmt.Errorf("%w: record %d was cut", model.ErrNotLeader, i)
				}
			}
			return true, nil
		}
		if e.repl.leaderGen.Load() != gen {
			return false, fmt.Errorf("%w: leadership changed before record %d was committed", model.ErrNotLeader, i)
		}
		return false, nil
	})
}

// WriteTicket marks the replication state before an append whose
// durability is waited for later (WaitDurable): a change of leadership or
// a truncation after it fails the wait, because the records may have been
// cut (and their positions reused) in between. The zero ticket of a
// single node's engine is never checked.
type WriteTicket struct{ gen, truncs uint64 }

// Ticket returns the ticket of an append about to be written.
func (e *Engine) Ticket() WriteTicket {
	if !e.cfg.Replicated {
		return WriteTicket{}
	}
	return WriteTicket{gen: e.repl.leaderGen.Load(), truncs: e.repl.truncations.Load()}
}

// waitCommittedPos waits until the records this leader wrote up to end,
// after tk was taken, are committed. A change of leadership or a cut since
// tk fails it with model.ErrNotLeader (the records may still commit under
// the next leader; idempotent producers find out when they retry).
func (e *Engine) waitCommittedPos(ctx context.Context, end model.LogPos, tk WriteTicket) error {
	if !e.clog.Writable() && !e.repl.held.Load() && !e.repl.handedOff.Load() {
		// Not leading (a retried duplicate answered by a replica that
		// just lost the group): the client is sent to the new leader
		// rather than kept waiting for a commit this replica may not
		// hear of.
		return fmt.Errorf("%w: this replica does not lead its group", model.ErrNotLeader)
	}
	return e.waitReplication(ctx, func() (bool, error) {
		if e.repl.truncations.Load() != tk.truncs || e.repl.leaderGen.Load() != tk.gen {
			return false, fmt.Errorf("%w: leadership changed before the records were committed", model.ErrNotLeader)
		}
		return model.LogPos(e.committed.Load()) >= end, nil
	})
}

// committedPoint waits (appends paused by the caller) until everything
// written is committed; false when that does not happen within the
// context.
func (e *Engine) committedPoint(ctx context.Context) bool {
	return e.waitReplication(ctx, func() (bool, error) { return e.CommitIndex() >= e.clog.LastIndex(), nil }) == nil
}

// waitReplication calls check now and after every change of the commit
// index, leadership or truncations, until it is done or fails, the log
// fails, the engine closes or ctx ends.
func (e *Engine) waitReplication(ctx context.Context, check func() (bool, error)) error {
	for {
		ch := e.repl.changedCh()
		if done, err := check(); done || err != nil {
			return err
		}
		if err := e.clog.Err(); err != nil {
			return err
		}
		if e.closed.Load() {
			return model.ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// FirstIndex returns the first index the log serves by index (0 when it
// holds none; see commitlog.Log.FirstIndex).
func (e *Engine) FirstIndex() model.Index { return e.clog.FirstIndex() }

// Entries returns the stored records with indexes in [lo, hi), at most
// maxBytes of them (at least one).
func (e *Engine) Entries(lo, hi model.Index, maxBytes int) ([]commitlog.IndexedEntry, error) {
	return e.clog.Entries(lo, hi, maxBytes)
}

// TermAt returns the term of the record with index i.
func (e *Engine) TermAt(i model.Index) (model.Term, error) { return e.clog.Term(i) }

// WaitIndexDurable waits until the records up to index i are durable under
// the engine's policy (fsynced in sync mode; at once in async mode).
func (e *Engine) WaitIndexDurable(ctx context.Context, i model.Index) error {
	if e.cfg.Durability != DurabilitySync || e.clog.SyncedIndex() >= i {
		return nil
	}
	end, err := e.clog.EndOf(i)
	if err != nil {
		return err
	}
	return e.clog.SyncTo(ctx, end)
}
