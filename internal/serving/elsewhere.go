package serving

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// elsewhere is a member's broker.Elsewhere: calls to the leaders of the
// groups a moved queue's records are in (in place when this member leads
// the group).
type elsewhere struct{ n *Node }

// queueCall is the body of the calls about a moved queue's records.
type queueCall struct {
	Group      int               `json:"g"`
	Topic      string            `json:"tp,omitempty"`
	Queue      model.QueueID     `json:"q,omitempty"`
	Offset     model.QueueOffset `json:"o,omitempty"`
	MaxBytes   int               `json:"mb,omitempty"`
	MaxRecords int               `json:"mr,omitempty"`
	NoWait     bool              `json:"nw,omitempty"`
	Deferred   bool              `json:"d,omitempty"`
	Stable     bool              `json:"s,omitempty"`
	Records    []byte            `json:"r,omitempty"` // broker.EncodeRecords / EncodeStored
	WaitMillis int64             `json:"w,omitempty"`
	PID        int64             `json:"p,omitempty"`
}

// queueAnswer is their answer.
type queueAnswer struct {
	Records    []byte              `json:"r,omitempty"`
	Offsets    []model.QueueOffset `json:"o,omitempty"` // appended: each record's base offset
	StoreTimes []int64             `json:"t,omitempty"`
	Next       model.QueueOffset   `json:"n,omitempty"`
	Start      model.QueueOffset   `json:"s,omitempty"`
	HW         model.QueueOffset   `json:"h,omitempty"`
	End        model.QueueOffset   `json:"e,omitempty"`
	Stable     model.QueueOffset   `json:"l,omitempty"`
	Bytes      int                 `json:"b,omitempty"`
	Producer   *producers.Exported `json:"p,omitempty"`
}

func (e elsewhere) call(ctx context.Context, m peer.Method, c queueCall, within time.Duration) (queueAnswer, error) {
	return peer.CallGroupWithin[queueCall, queueAnswer](ctx, e.n.Member.Peers(), c.Group, m, c, within)
}

func (e elsewhere) Append(ctx context.Context, g model.GroupID, topic model.TopicName, recs []*storage.Record, opts storage.AppendOptions) error {
	return e.n.appends.append(ctx, appendKey{g, topic, opts}, recs, e.sendAppends)
}

// sendAppends sends records of one or more appends in one call.
func (e elsewhere) sendAppends(k appendKey, recs []*storage.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), peer.Timeout)
	defer cancel()
	ans, err := e.call(ctx, peer.QueueAppend, queueCall{Group: int(k.group), Topic: k.topic.String(), NoWait: k.opts.NoWait,
		Deferred: k.opts.Deferred, Records: broker.EncodeRecords(nil, recs)}, 0)
	if err != nil {
		return err
	}
	if len(ans.Offsets) != len(recs) || len(ans.StoreTimes) != len(recs) {
		return fmt.Errorf("queue append in group %d: %d offsets for %d records", k.group, len(ans.Offsets), len(recs))
	}
	for i, r := range recs {
		r.BaseOffset, r.StoreTime = ans.Offsets[i], ans.StoreTimes[i]
	}
	return nil
}

// appendKey is what appends sent together share: the group, the topic and
// the durability asked.
type appendKey struct {
	group model.GroupID
	topic model.TopicName
	opts  storage.AppendOptions
}

// appendBatcher sends the appends to moved queues that arrive while one
// call to the same group is under way together in the next call, as a
// log's group commit does: a home group's leader forwarding many clients'
// sends makes one call per round trip, not one per send.
type appendBatcher struct {
	mu      sync.Mutex
	waiting map[appendKey][]*pendingAppend
	sending map[appendKey]bool
}

// pendingAppend is one caller's records and where its outcome goes.
type pendingAppend struct {
	recs []*storage.Record
	done chan error
}

// append queues recs and waits for the call that carries them (or ctx).
func (b *appendBatcher) append(ctx context.Context, k appendKey, recs []*storage.Record, send func(appendKey, []*storage.Record) error) error {
	p := &pendingAppend{recs: recs, done: make(chan error, 1)}
	b.mu.Lock()
	if b.waiting == nil {
		b.waiting, b.sending = map[appendKey][]*pendingAppend{}, map[appendKey]bool{}
	}
	b.waiting[k] = append(b.waiting[k], p)
	start := !b.sending[k]
	b.sending[k] = true
	b.mu.Unlock()
	if start {
		go b.drain(k, send) // ends once nothing waits for k
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain sends what waits for k, a call at a time, until nothing does.
func (b *appendBatcher) drain(k appendKey, send func(appendKey, []*storage.Record) error) {
	for {
		b.mu.Lock()
		batch := b.waiting[k]
		delete(b.waiting, k)
		if len(batch) == 0 {
			b.sending[k] = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		var recs []*storage.Record
		for _, p := range batch {
			recs = append(recs, p.recs...)
		}
		err := send(k, recs)
		for _, p := range batch {
			p.done <- err
		}
	}
}

func (e elsewhere) Read(ctx context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, opts storage.ReadOptions) (*storage.ReadResult, error) {
	ans, err := e.call(ctx, peer.QueueRead, queueCall{Group: int(g), Queue: q, Offset: offset, MaxBytes: opts.MaxBytes, MaxRecords: opts.MaxRecords}, 0)
	if err != nil {
		return nil, err
	}
	recs, err := broker.DecodeStored(ans.Records)
	if err != nil {
		return nil, err
	}
	return &storage.ReadResult{Records: recs, NextOffset: ans.Next, HighWatermark: ans.HW, StartOffset: ans.Start, Bytes: ans.Bytes}, nil
}

func (e elsewhere) Offsets(ctx context.Context, g model.GroupID, q model.QueueID) (start, hw, end, stable model.QueueOffset, err error) {
	ans, err := e.call(ctx, peer.QueueOffsets, queueCall{Group: int(g), Queue: q}, 0)
	return ans.Start, ans.HW, ans.End, ans.Stable, err
}

// maxQueueWait bounds one remote wait; the caller waits again after it.
const maxQueueWait = 20 * time.Second

func (e elsewhere) Wait(ctx context.Context, g model.GroupID, q model.QueueID, offset model.QueueOffset, stable bool) error {
	wait := maxQueueWait
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	if wait <= 0 {
		return nil
	}
	_, err := e.call(ctx, peer.QueueWait, queueCall{Group: int(g), Queue: q, Offset: offset, Stable: stable, WaitMillis: wait.Milliseconds()},
		wait+peer.Timeout)
	return err
}

func (e elsewhere) ProducerState(ctx context.Context, g model.GroupID, q model.QueueID, pid int64) (producers.Exported, bool, error) {
	ans, err := e.call(ctx, peer.QueueProducer, queueCall{Group: int(g), Queue: q, PID: pid}, 0)
	if err != nil || ans.Producer == nil {
		return producers.Exported{}, false, err
	}
	return *ans.Producer, true, nil
}

// answerQueues registers this member's answers to the moved queues' calls.
func (n *Node) answerQueues(p *peer.Peers) {
	peer.Handle(p, peer.QueueAppend, func(ctx context.Context, _ model.NodeID, c queueCall) (queueAnswer, error) {
		b, err := n.groupBroker(c.Group)
		if err != nil {
			return queueAnswer{}, err
		}
		recs, err := broker.DecodeRecords(c.Records)
		if err != nil {
			return queueAnswer{}, err
		}
		name, err := model.ParseTopicName(c.Topic)
		if err != nil {
			return queueAnswer{}, err
		}
		if err := b.AppendGuest(ctx, name, recs, storage.AppendOptions{NoWait: c.NoWait, Deferred: c.Deferred}); err != nil {
			return queueAnswer{}, err
		}
		ans := queueAnswer{Offsets: make([]model.QueueOffset, len(recs)), StoreTimes: make([]int64, len(recs))}
		for i, r := range recs {
			ans.Offsets[i], ans.StoreTimes[i] = r.BaseOffset, r.StoreTime
		}
		return ans, nil
	})
	peer.Handle(p, peer.QueueRead, func(_ context.Context, _ model.NodeID, c queueCall) (queueAnswer, error) {
		b, err := n.groupBroker(c.Group)
		if err != nil {
			return queueAnswer{}, err
		}
		res, err := b.ReadGuest(c.Queue, c.Offset, storage.ReadOptions{MaxBytes: c.MaxBytes, MaxRecords: c.MaxRecords})
		if err != nil {
			return queueAnswer{}, err
		}
		defer res.Release()
		recs, err := broker.EncodeStored(nil, res.Records)
		return queueAnswer{Records: recs, Next: res.NextOffset, HW: res.HighWatermark, Start: res.StartOffset, Bytes: res.Bytes}, err
	})
	peer.Handle(p, peer.QueueOffsets, func(_ context.Context, _ model.NodeID, c queueCall) (queueAnswer, error) {
		b, err := n.groupBroker(c.Group)
		if err != nil {
			return queueAnswer{}, err
		}
		var a queueAnswer
		a.Start, a.HW, a.End, a.Stable, err = b.GuestOffsets(c.Queue)
		return a, err
	})
	peer.Handle(p, peer.QueueProducer, func(_ context.Context, _ model.NodeID, c queueCall) (queueAnswer, error) {
		st := n.Stack(c.Group)
		if st == nil {
			return queueAnswer{}, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group)
		}
		if st.Parts.Producers == nil {
			return queueAnswer{}, nil
		}
		if ex, ok := st.Parts.Producers.ExportOne(c.Queue, c.PID); ok {
			return queueAnswer{Producer: &ex}, nil
		}
		return queueAnswer{}, nil
	})
	peer.Handle(p, peer.QueueWait, func(ctx context.Context, _ model.NodeID, c queueCall) (queueAnswer, error) {
		b, err := n.groupBroker(c.Group)
		if err != nil {
			return queueAnswer{}, err
		}
		wctx, cancel := context.WithTimeout(ctx, min(time.Duration(c.WaitMillis)*time.Millisecond, maxQueueWait))
		defer cancel()
		if err := b.WaitGuest(wctx, c.Queue, c.Offset, c.Stable); err != nil && wctx.Err() == nil {
			return queueAnswer{}, err
		}
		return queueAnswer{}, nil
	})
}

// groupBroker is the broker of group g, led here.
func (n *Node) groupBroker(g int) (*broker.Broker, error) {
	st := n.Stack(g)
	if st == nil {
		return nil, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, g)
	}
	return st.Broker, nil
}
