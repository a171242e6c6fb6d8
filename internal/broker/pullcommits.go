package broker

import (
	"context"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Offsets carried by pulls. A RocketMQ push consumer's every pull names
// the consumer's progress in that queue (the pull's commit offset), which
// the broker takes as a commit nobody waits for. Writing each as a record
// made the offset record and its apply a tenth of a consumed message's
// cost, so they are kept in memory — the latest per group and queue,
// visible to offset queries at once — and written every pullCommitFlush,
// one record per group, as a RocketMQ broker persists such offsets every
// few seconds. A crash or a failover therefore forgets up to that much
// pull-carried progress: the messages after the last written offset are
// delivered again (at least once) if the consumer restarts or its queues
// move before it commits again. Explicit commits (UPDATE_CONSUMER_OFFSET,
// Kafka's OffsetCommit) are written at once and replace what is pending
// for their queues; a graceful close writes what is pending.

// pullCommitFlush is how often pending pull-carried offsets are written.
const pullCommitFlush = time.Second

type pendingCommit struct {
	offset model.QueueOffset
	at     int64 // unix ms
}

// pullCommits holds the offsets pulls carried since the last flush.
type pullCommits struct {
	mu      sync.Mutex
	pending map[string]map[model.QueueID]pendingCommit
}

// CommitPulled notes the offset a pull carried for a group's queue (see
// above): offset queries see it at once, the log at the next flush.
func (b *Broker) CommitPulled(group string, queue model.QueueID, offset model.QueueOffset) {
	p := &b.offsets.pulled
	now := b.opts.Now().UnixMilli()
	p.mu.Lock()
	p.groupLocked(group)[queue] = pendingCommit{offset: offset, at: now}
	p.mu.Unlock()
}

// groupLocked returns a group's pending offsets, creating them (p.mu held).
func (p *pullCommits) groupLocked(group string) map[model.QueueID]pendingCommit {
	g := p.pending[group]
	if g == nil {
		if p.pending == nil {
			p.pending = map[string]map[model.QueueID]pendingCommit{}
		}
		g = map[model.QueueID]pendingCommit{}
		p.pending[group] = g
	}
	return g
}

// overlay returns committed with the group's pending offsets over it.
func (p *pullCommits) overlay(group string, committed map[model.QueueID]Committed) map[model.QueueID]Committed {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, pc := range p.pending[group] {
		c := committed[q]
		c.Offset, c.CommitTime, c.LeaderEpoch = pc.offset, pc.at, -1
		committed[q] = c
	}
	return committed
}

// drop forgets what is pending for a group's queues (all of them when
// queues is nil): a commit or deletion written now supersedes it.
func (p *pullCommits) drop(group string, queues []model.QueueID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.pending[group]
	if g == nil {
		return
	}
	if queues == nil {
		delete(p.pending, group)
		return
	}
	for _, q := range queues {
		delete(g, q)
	}
	if len(g) == 0 {
		delete(p.pending, group)
	}
}

// groups lists the groups with pending offsets.
func (p *pullCommits) groups() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.pending))
	for g := range p.pending {
		out = append(out, g)
	}
	return out
}

// take removes and returns everything pending.
func (p *pullCommits) take() map[string]map[model.QueueID]pendingCommit {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.pending
	p.pending = nil
	return out
}

// flushPulled writes what pulls carried since the last flush, one record
// per group. A group whose write fails keeps its offsets pending unless
// newer ones arrived meanwhile.
func (b *Broker) flushPulled(ctx context.Context) error {
	all := b.offsets.pulled.take()
	var first error
	for group, queues := range all {
		commits := make([]OffsetCommit, 0, len(queues))
		var at int64
		for q, pc := range queues {
			commits = append(commits, OffsetCommit{Queue: q, Offset: pc.offset, LeaderEpoch: -1})
			at = max(at, pc.at)
		}
		err := b.offsets.writeRecord(ctx, opCommitEpochs, group, commits, at, storage.AppendOptions{NoWait: true})
		if err != nil {
			b.offsets.pulled.restore(group, queues)
			if first == nil {
				first = err
			}
		}
	}
	return first
}

// restore puts back offsets a flush could not write, unless newer ones
// are pending.
func (p *pullCommits) restore(group string, queues map[model.QueueID]pendingCommit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.groupLocked(group)
	for q, pc := range queues {
		if _, newer := g[q]; !newer {
			g[q] = pc
		}
	}
}
