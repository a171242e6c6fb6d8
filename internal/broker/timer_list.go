package broker

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

// PendingTimer is a timer or delayed message waiting for its time.
type PendingTimer struct {
	Topic      string // where it will be delivered
	Queue      int32  // the queue it asked for (-1: any)
	ID         string // its unique id (UNIQ_KEY)
	Due        time.Time
	DelayLevel int // its RocketMQ delay level (0: a timer message)
	Tags       string
	Keys       string
	Size       int               // body bytes
	Offset     model.QueueOffset // its entry in the timer log
}

// TimerListLimits bound a listing of pending timers.
type TimerListLimits struct {
	Max  int // entries returned (default 100)
	Scan int // timer-log entries read at most (default 100,000)
}

// PendingTimers lists timer and delayed messages not delivered yet, the
// earliest first: all of them, or those for topic (when not empty). more
// reports that the list stops at limits.Max or after reading limits.Scan
// entries of the timer log.
func (b *Broker) PendingTimers(ctx context.Context, topic string, limits TimerListLimits) (list []PendingTimer, more bool, err error) {
	if limits.Max <= 0 {
		limits.Max = 100
	}
	if limits.Scan <= 0 {
		limits.Scan = 100_000
	}
	w := b.timers
	if w == nil {
		return nil, false, nil
	}
	type candidate struct {
		entry   timerEntry
		payload []byte
	}
	// What the delivery loop holds (seconds taken into the heap), and the
	// lists of the seconds it has not taken yet.
	w.mu.Lock()
	cursor, taken := w.cursor, w.taken
	var found []candidate
	for _, e := range w.near {
		found = append(found, candidate{e, w.payloads[e.offset]})
	}
	var seconds []int64
	heads := map[int64]model.QueueOffset{}
	for sec, head := range w.heads {
		if sec >= taken || sec == w.walking {
			seconds = append(seconds, sec)
			heads[sec] = head
		}
	}
	cancelled := make(map[model.QueueOffset]bool, len(w.cancelled))
	for off := range w.cancelled {
		cancelled[off] = true
	}
	w.mu.Unlock()
	slices.Sort(seconds)

	seen := map[model.QueueOffset]bool{}
	for _, c := range found {
		seen[c.entry.offset] = true
	}
	matches := func(c candidate) (PendingTimer, bool) {
		m, err := DecodeMessage(c.payload)
		if err != nil {
			return PendingTimer{}, false
		}
		p := pendingTimer(c.entry, m)
		return p, topic == "" || p.Topic == topic
	}
	var out []PendingTimer
	for _, c := range found {
		if p, ok := matches(c); ok {
			out = append(out, p)
		}
	}
	scanned := 0
	for _, sec := range seconds {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if len(out) >= limits.Max && sec*1000 > out[len(out)-1].Due.UnixMilli() {
			more = true
			break // later seconds cannot come before what is kept
		}
		if scanned >= limits.Scan {
			more = true
			break
		}
		recalled := map[model.QueueOffset]bool{}
		for off := heads[sec]; off >= 0; {
			due, prev, cancels, payload, err := b.timerEntryAt(off)
			if err != nil {
				return nil, false, err
			}
			scanned++
			e := timerEntry{due: due, offset: off}
			switch {
			case cancels >= 0:
				recalled[cancels] = true // a tombstone comes before what it cancels
			case recalled[off] || cancelled[off] || seen[off] || e.before(cursor):
			default:
				seen[off] = true
				if p, ok := matches(candidate{e, payload}); ok {
					out = append(out, p)
				}
			}
			off = prev
		}
		slices.SortFunc(out, func(a, b PendingTimer) int {
			return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.Offset, b.Offset))
		})
		if len(out) > limits.Max {
			out, more = out[:limits.Max], true
		}
	}
	slices.SortFunc(out, func(a, b PendingTimer) int {
		return cmp.Or(a.Due.Compare(b.Due), cmp.Compare(a.Offset, b.Offset))
	})
	if len(out) > limits.Max {
		out, more = out[:limits.Max], true
	}
	return out, more, nil
}

// pendingTimer describes a timer entry.
func pendingTimer(e timerEntry, m model.Message) PendingTimer {
	p := PendingTimer{Due: time.UnixMilli(e.due), Offset: e.offset, Queue: -1, Tags: m.Tags, Keys: string(m.Key), Size: len(m.Body)}
	if v, ok := m.Header(HeaderRealTopic); ok {
		p.Topic = string(v)
	}
	if v, ok := m.Header(HeaderRealQueue); ok {
		if q, err := strconv.Atoi(string(v)); err == nil {
			p.Queue = int32(q)
		}
	}
	if v, ok := m.Header(HeaderUniqKey); ok {
		p.ID = string(v)
	}
	if v, ok := m.Header(HeaderDelayLevel); ok {
		p.DelayLevel, _ = strconv.Atoi(string(v))
	}
	return p
}
