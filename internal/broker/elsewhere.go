package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// A queue that moved keeps its home: RocketMQ clients go on naming it by
// its home group's broker name and queue id (as RocketMQ's static topics
// forward an old client's requests). Its home broker keeps serving it —
// offsets, POP state, transactions' half messages, timers — and reaches
// its records where they are: appends and reads past the home piece go to
// the leader of the group holding them (Elsewhere).

// Elsewhere reaches queues in other groups: a cluster member's calls to
// those groups' leaders.
type Elsewhere interface {
	// Append appends records (their Queue set) in group g, filling each
	// one's BaseOffset and StoreTime.
	Append(ctx context.Context, g model.GroupID, topic model.TopicName, recs []*storage.Record, opts storage.AppendOptions) error
	// Read reads queue q in group g.
	Read(ctx context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error)
	// Offsets are queue q's start, high watermark, end and last stable
	// offset in group g.
	Offsets(ctx context.Context, g model.GroupID, q model.QueueID) (start, hw, end, stable model.QueueOffset, err error)
	// Wait returns once queue q holds records past offset in group g (or
	// ctx ends).
	Wait(ctx context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, stable bool) error
	// ProducerState is an idempotent producer's sequence state in queue q
	// as group g holds it (false: none).
	ProducerState(ctx context.Context, g model.GroupID, q model.QueueID, pid int64) (producers.Exported, bool, error)
}

// Elsewhere is how the broker reaches other groups' queues (nil on a
// single node).
func (b *Broker) Elsewhere() Elsewhere { return b.opts.Elsewhere }

// PriorProducerState is an idempotent producer's sequence state in the
// group a guest queue (index at or past t.Queues) was in before it moved
// here: a producer this group's state does not know yet — its leader
// changed since the move, which carried the states in memory — may send
// again a batch it wrote there (false: none, or not a guest).
func (b *Broker) PriorProducerState(ctx context.Context, t *Topic, index int32, pid int64) (producers.Exported, bool) {
	if int(index) < len(t.Queues) || b.opts.Elsewhere == nil {
		return producers.Exported{}, false
	}
	i := t.GlobalIndex(b.opts.Placement.Group, int(index))
	if i < 0 {
		return producers.Exported{}, false
	}
	chain := t.Moves.Chain(t.Groups, i)
	prior := -1
	for j := len(chain) - 1; j > 0; j-- {
		if chain[j].From != route.PieceMoving && chain[j].Group == b.opts.Placement.Group {
			prior = j - 1
			break
		}
	}
	if prior < 0 {
		return producers.Exported{}, false
	}
	ex, ok, err := b.opts.Elsewhere.ProducerState(ctx, chain[prior].Group, t.All[i], pid)
	if err != nil {
		b.log.Warn("a moved queue's producer state in its previous group", "queue", t.All[i], "producer_id", pid, "err", err)
		return producers.Exported{}, false
	}
	return ex, ok
}

// elsewhereTimeout bounds a call for a queue read or offsets without a
// caller's context.
const elsewhereTimeout = 5 * time.Second

// movedAway says where the broker's own queue index of t takes appends
// when it moved: its group, whether it is still moving, and its
// topic-wide index; ok false when it did not move away.
func (b *Broker) movedAway(t *Topic, index int32) (g model.GroupID, moving bool, i int, ok bool) {
	if !t.Away(index) {
		return 0, false, 0, false
	}
	i = t.GlobalIndex(b.opts.Placement.Group, int(index))
	return t.GroupOf(i), t.Moves.Moving(i), i, true
}

// pieceGroup is the group holding offset of queue i: the last piece
// starting at or below it.
func pieceGroup(t *Topic, i int, offset model.QueueOffset) model.GroupID {
	chain := t.Moves.Chain(t.Groups, i)
	g := chain[0].Group
	for _, p := range chain[1:] {
		if p.From != route.PieceMoving && p.From <= offset {
			g = p.Group
		}
	}
	return g
}

// appendElsewhere appends a moved queue's records in its group.
func (b *Broker) appendElsewhere(ctx context.Context, t *Topic, index int32, recs []*storage.Record, opts storage.AppendOptions) error {
	g, moving, _, _ := b.movedAway(t, index)
	if moving || b.opts.Elsewhere == nil {
		return fmt.Errorf("%w: %s queue %d", model.ErrQueueMoved, t.Name, index)
	}
	return b.opts.Elsewhere.Append(ctx, g, t.Name, recs, opts)
}

// readElsewhere reads a moved queue at offset where its piece holding
// offset is: here for the home piece, else in that piece's group.
func (b *Broker) readElsewhere(t *Topic, index int32, id model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, bool, error) {
	_, _, i, ok := b.movedAway(t, index)
	if !ok {
		return nil, false, nil
	}
	g := pieceGroup(t, i, offset)
	if g == b.opts.Placement.Group || b.opts.Elsewhere == nil {
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), elsewhereTimeout)
	defer cancel()
	res, err := b.opts.Elsewhere.Read(ctx, g, id, offset, opts)
	return res, true, err
}

// awayWatch is a watch on a moved queue past its home piece, waited on in
// the group holding its records now.
type awayWatch struct {
	w     Watch
	id    model.QueueID
	group model.GroupID
}

// splitAway separates watches on queues that moved away (their new records
// arrive elsewhere) from the rest.
func (b *Broker) splitAway(watches []Watch) (local []Watch, away []awayWatch) {
	if b.opts.Elsewhere == nil {
		return watches, nil
	}
	for _, w := range watches {
		id, t, err := b.QueueID(w.Topic, w.Index)
		if err == nil {
			if g, moving, _, ok := b.movedAway(t, w.Index); ok && !moving {
				away = append(away, awayWatch{w, id, g})
				continue
			}
		}
		local = append(local, w)
	}
	return local, away
}

// waitAway waits on local watches here and on away ones where their
// records are; the first to see records ends the wait.
func (b *Broker) waitAway(parent context.Context, local []Watch, away []awayWatch, minBytes int) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	done := make(chan error, len(away)+1)
	waiting := len(away)
	for _, a := range away {
		go func() { done <- b.opts.Elsewhere.Wait(ctx, a.group, a.id, a.w.Offset, a.w.Stable) }()
	}
	if len(local) > 0 {
		waiting++
		go func() { done <- b.WaitBytes(ctx, local, minBytes) }()
	}
	err := <-done
	cancel()
	for range waiting - 1 {
		<-done
	}
	if err != nil && parent.Err() == nil {
		// A group that cannot be reached now: the caller reads again a
		// little later, as after a wait that saw nothing.
		b.log.Debug("waiting for a moved queue's records", "err", err)
		select {
		case <-parent.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// awayRef is the topic and the broker's own index of queue id when it
// moved away (ok false otherwise).
func (b *Broker) awayRef(id model.QueueID) (*Topic, int32, bool) {
	if b.opts.Elsewhere == nil {
		return nil, 0, false
	}
	b.topicMu.RLock()
	ref, ok := b.byQueue[id]
	b.topicMu.RUnlock()
	if !ok || int(ref.Index) >= len(ref.Topic.Queues) || !ref.Topic.Away(ref.Index) {
		return nil, 0, false
	}
	return ref.Topic, ref.Index, true
}

// queueOffsets are queue id's offsets and last stable offset, where its
// records are when it moved away.
func (b *Broker) queueOffsets(id model.QueueID) (start, hw, end, stable model.QueueOffset, err error) {
	if t, index, ok := b.awayRef(id); ok {
		if g, moving, _, _ := b.movedAway(t, index); !moving {
			ctx, cancel := context.WithTimeout(context.Background(), elsewhereTimeout)
			defer cancel()
			if start, _, _, err = b.engine.Offsets(id); err != nil {
				return 0, 0, 0, 0, err
			}
			_, hw, end, stable, err = b.opts.Elsewhere.Offsets(ctx, g, id)
			return start, hw, end, stable, err
		}
	}
	start, hw, end, err = b.engine.Offsets(id)
	return start, hw, end, b.LastStable(id, hw), err
}

// readQueue reads queue id at offset where that record is.
func (b *Broker) readQueue(id model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error) {
	if t, index, ok := b.awayRef(id); ok {
		if res, ok, err := b.readElsewhere(t, index, id, offset, opts); ok {
			return res, err
		}
	}
	return b.engine.Read(id, offset, opts)
}

// AppendGuest appends records of a queue moved to this broker's group
// (another group's broker forwarding its clients' appends).
// A broker that has not seen the move yet reads the topic from the
// metadata store first.
func (b *Broker) AppendGuest(ctx context.Context, topic model.TopicName, recs []*storage.Record, opts storage.AppendOptions) error {
	refreshed := false
	for _, r := range recs {
		err := b.checkGuest(r.Queue)
		if errors.Is(err, model.ErrQueueMoved) && !refreshed {
			refreshed = true
			if _, serr := b.storedTopic(ctx, topic); serr == nil {
				err = b.checkGuest(r.Queue)
			}
		}
		if err != nil {
			return err
		}
	}
	return b.engine.AppendWith(ctx, recs, opts)
}

// checkGuest refuses a queue that does not take appends in this broker's
// group.
func (b *Broker) checkGuest(id model.QueueID) error {
	b.topicMu.RLock()
	ref, ok := b.byQueue[id]
	b.topicMu.RUnlock()
	if !ok || int(ref.Index) < len(ref.Topic.Queues) && ref.Topic.Away(ref.Index) {
		return fmt.Errorf("%w: queue %d does not take appends in group %d", model.ErrQueueMoved, id, b.opts.Placement.Group)
	}
	return route.Check(id, b.opts.Router.Locate(id))
}

// GuestOffsets are a queue's offsets in this broker's group and its last
// stable offset.
func (b *Broker) GuestOffsets(id model.QueueID) (start, hw, end, stable model.QueueOffset, err error) {
	if err := route.Check(id, b.opts.Router.Locate(id)); err != nil {
		return 0, 0, 0, 0, err
	}
	start, hw, end, err = b.engine.Offsets(id)
	return start, hw, end, b.LastStable(id, hw), err
}

// ReadGuest reads a queue in this broker's group by its storage id.
func (b *Broker) ReadGuest(id model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error) {
	if err := route.Check(id, b.opts.Router.Locate(id)); err != nil {
		return nil, err
	}
	return b.engine.Read(id, offset, opts)
}

// WaitGuest returns once queue id holds visible records past offset (below
// its last stable offset when stable), or ctx ends.
func (b *Broker) WaitGuest(ctx context.Context, id model.QueueID, offset model.QueueOffset, stable bool) error {
	for {
		_, hw, _, err := b.engine.Offsets(id)
		if err != nil {
			return err
		}
		if limit := hw; offset < limit && (!stable || offset < b.LastStable(id, hw)) {
			return nil
		}
		if err := b.engine.Wait(ctx, map[model.QueueID]model.QueueOffset{id: max(hw, offset)}); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// EncodeRecords encodes records for a call: each as a log record
// (commitlog.AppendRecord) after its length.
func EncodeRecords(dst []byte, recs []*storage.Record) []byte {
	for _, r := range recs {
		h := commitlog.Header{Format: r.Format, Flags: r.Flags, Queue: r.Queue, BaseOffset: max(r.BaseOffset, 0), Count: r.Count,
			Timestamp: r.Timestamp, StoreTime: r.StoreTime, TagHash: r.TagHash}
		dst = commitlog.AppendRecord(dst, &h, r.Keys, r.Payload)
	}
	return dst
}

// DecodeRecords decodes EncodeRecords' output (the records alias b).
func DecodeRecords(b []byte) ([]*storage.Record, error) {
	var out []*storage.Record
	for len(b) > 0 {
		rec, err := commitlog.Decode(b)
		if err != nil {
			return nil, err
		}
		r := &storage.Record{Format: rec.Format, Flags: rec.Flags, Queue: rec.Queue, BaseOffset: rec.BaseOffset, Count: rec.Count,
			Timestamp: rec.Timestamp, StoreTime: rec.StoreTime, TagHash: rec.TagHash, Payload: rec.Payload}
		if err := rec.EachKey(func(k commitlog.Key) { r.Keys = append(r.Keys, k) }); err != nil {
			return nil, err
		}
		out = append(out, r)
		b = b[rec.Length:]
	}
	return out, nil
}

// EncodeStored encodes stored records (a read's) as EncodeRecords does.
func EncodeStored(dst []byte, recs []storage.StoredRecord) ([]byte, error) {
	for i := range recs {
		r := &recs[i]
		var keys []commitlog.Key
		if err := r.EachKey(func(k commitlog.Key) { keys = append(keys, k) }); err != nil {
			return dst, err
		}
		h := r.Header
		dst = commitlog.AppendRecord(dst, &h, keys, r.Payload)
	}
	return dst, nil
}

// DecodeStored decodes EncodeStored's output as stored records (aliasing
// b).
func DecodeStored(b []byte) ([]storage.StoredRecord, error) {
	var out []storage.StoredRecord
	for len(b) > 0 {
		rec, err := commitlog.Decode(b)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
		b = b[rec.Length:]
	}
	return out, nil
}
