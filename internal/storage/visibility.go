package storage

import (
	"github.com/rosettamq/rosetta/internal/model"
)

// Read visibility. Readers never see past the visible end. By default it is
// the log's own: the synced end in sync mode, the written end in async mode
// (the single-node high watermark). With Config.CommitGated the replication
// group sets it from outside — the commit index's position — through
// SetCommitted; the log's own visibility still bounds it, and long-poll
// waiters wake as it advances.

// visible returns the end readers may see.
func (e *Engine) visible() model.LogPos {
	v := e.clog.Visible()
	if e.cfg.CommitGated {
		if c := model.LogPos(e.committed.Load()); c < v {
			return c
		}
	}
	return v
}

// SetCommitted moves the committed end (a record boundary: the end of the
// record at the commit index) forward; with Config.CommitGated readers see
// up to it. It never moves back.
func (e *Engine) SetCommitted(end model.LogPos) {
	for {
		cur := e.committed.Load()
		if int64(end) <= cur {
			return
		}
		if e.committed.CompareAndSwap(cur, int64(end)) {
			break
		}
	}
	if e.cfg.CommitGated {
		e.onVisible(e.visible())
	}
}

// DurableIndex is the index of the newest record known durable on this
// node (a Raft follower acknowledges up to it).
func (e *Engine) DurableIndex() model.Index { return e.clog.SyncedIndex() }

// logVisible is the log's visibility callback: with a commit gate, what
// became visible is bounded by the committed end.
func (e *Engine) logVisible(end model.LogPos) {
	if e.cfg.CommitGated {
		end = min(end, model.LogPos(e.committed.Load()))
	}
	e.onVisible(end)
}

// Term is the log's current term (the leadership term new records carry).
func (e *Engine) Term() model.Term { return e.clog.CurrentTerm() }
