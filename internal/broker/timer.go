package broker

// Timer messages: a message to be appended to its topic at an arbitrary
// moment (RocketMQ's TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS).
//
// Store. Timer messages are appended to one internal queue (the timer log)
// with the record timestamp and the index entry's tag-hash slot set to the
// due time (ms) and a header naming
// the previous entry due in the same second: each second is a linked list
// through the log, and memory holds only the head of each second's list
// (bounded by the number of distinct seconds pending, not the number of
// messages). Entries are durable like any message, under the storage
// policy.
//
// Delivery. One loop takes each second a little before it starts, walks its
// list (reading the entries back from the log), keeps those entries in a
// small heap by due time and appends each to its real topic when due, with
// a timer set to the millisecond. Entries sent for a second already taken go
// straight into the heap. The cursor (the first entry, by due time and log
// order, not delivered yet) is a record in its own internal queue (the
// cursor log, trimmed to its newest record now and then), so it is part of
// the log like the entries; after a restart the heads are rebuilt from the
// timer queue's index alone (the due times in its tag-hash slots), entries
// before the cursor are skipped and everything overdue is delivered at once.
// Without a cursor (older data kept it in the metadata store, read once)
// delivery starts at the earliest entry: a timer is delivered again rather
// than skipped. A crash between a delivery and the next cursor save (within
// a loop turn) may deliver that message twice: at least once, as RocketMQ's
// timer wheel.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Timer properties (headers), as RocketMQ names them.
const (
	HeaderTimerDeliverMs = "TIMER_DELIVER_MS"
	HeaderTimerDelaySec  = "TIMER_DELAY_SEC"
	HeaderTimerDelayMs   = "TIMER_DELAY_MS"
	HeaderTimerOutMs     = "TIMER_OUT_MS"
	headerTimerPrev      = "__ROSETTA_TIMER_PREV"
)

// ErrTimerIllegal is a timer message whose delivery time is out of range.
var ErrTimerIllegal = errors.New("illegal timer message")

var timerTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "timer"}

// timerCursorTopic holds the delivery cursor's saves.
var timerCursorTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "timer_cursor"}

// legacyTimerCursorKey is where older versions kept the cursor.
const legacyTimerCursorKey = "timer/cursor"

// timerCursorTrimEvery is how many cursor saves pass between trims of the
// cursor log to its newest record.
const timerCursorTrimEvery = 1024

// timerCursorSaveEvery spaces out cursor saves.
const timerCursorSaveEvery = 200 * time.Millisecond

// timerLookahead is how long before a second starts its entries are taken
// into the heap.
const timerLookahead = time.Second

// timerDeliverBatch bounds the messages one delivery append carries.
const timerDeliverBatch = 256

// timerWheel is the broker's timer state.
type timerWheel struct {
	mu          sync.Mutex
	queue       model.QueueID
	cursorQueue model.QueueID               // the cursor log
	heads       map[int64]model.QueueOffset // second → last entry due in it
	taken       int64                       // seconds below are in the heap or delivered
	walking     int64                       // the second whose list is being read (-1: none)
	cursor      timerEntry                  // entries ordered before it are delivered (persisted)
	near        timerHeap
	wake        chan struct{}
	// cancelled holds recalled entries of seconds being walked or taken.
	cancelled map[model.QueueOffset]bool
	// payloads holds the heap's entries as read (or written), so delivery
	// does not read them again.
	payloads map[model.QueueOffset][]byte
}

type timerEntry struct {
	due    int64 // ms
	offset model.QueueOffset
}

// before orders entries by due time, then log order: the delivery order.
func (e timerEntry) before(o timerEntry) bool {
	return e.due < o.due || e.due == o.due && e.offset < o.offset
}

func (e timerEntry) String() string { return fmt.Sprintf("%d:%d", e.due, e.offset) }

func parseTimerCursor(s string) (timerEntry, error) {
	var e timerEntry
	_, err := fmt.Sscanf(s, "%d:%d", &e.due, &e.offset)
	return e, err
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) remove(i int)      { heap.Remove(h, i) }

func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// TimerDeliverAt reads a message's timer properties: the delivery time in
// ms (TIMER_DELAY_SEC, then TIMER_DELAY_MS, then TIMER_DELIVER_MS, as
// RocketMQ reads them), and whether it has any. A message also carrying a
// DELAY level is not a timer message (the level wins).
func TimerDeliverAt(m *model.Message, now time.Time) (int64, bool, error) {
	if _, ok := m.Header(HeaderDelayLevel); ok {
		return 0, false, nil
	}
	num := func(k string) (int64, bool, error) {
		v, ok := m.Header(k)
		if !ok {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, true, fmt.Errorf("%w: %s=%q", ErrTimerIllegal, k, v)
		}
		return n, true, nil
	}
	if n, ok, err := num(HeaderTimerDelaySec); ok || err != nil {
		return now.UnixMilli() + n*1000, true, err
	}
	if n, ok, err := num(HeaderTimerDelayMs); ok || err != nil {
		return now.UnixMilli() + n, true, err
	}
	n, ok, err := num(HeaderTimerDeliverMs)
	return n, ok, err
}

// startTimers opens the timer queue, rebuilds the list heads from its index
// and starts the delivery loop.
func (b *Broker) startTimers(ctx, bctx context.Context) error {
	retention := (b.opts.MaxTimerDelay + 24*time.Hour).Milliseconds()
	t, err := b.EnsureInternalTopic(ctx, timerTopic, 1, TopicConfig{RetentionMs: retention})
	if err != nil {
		return fmt.Errorf("timer topic: %w", err)
	}
	ct, err := b.internalTopic(ctx, timerCursorTopic, 1)
	if err != nil {
		return fmt.Errorf("timer cursor topic: %w", err)
	}
	w := &timerWheel{queue: t.Queues[0], cursorQueue: ct.Queues[0], heads: map[int64]model.QueueOffset{}, wake: make(chan struct{}, 1),
		cancelled: map[model.QueueOffset]bool{}, payloads: map[model.QueueOffset][]byte{}}
	cursor, found, err := b.loadTimerCursor(ctx, w.cursorQueue)
	if err != nil {
		return err
	}
	earliest := int64(-1)
	err = b.engine.ScanIndex(w.queue, 0, func(e storage.IndexEntry) bool {
		due := int64(e.TagHash)
		if found && due/1000 < cursor.due/1000 {
			return true
		}
		w.heads[due/1000] = max(w.heads[due/1000], e.BaseOffset)
		if earliest < 0 || due < earliest {
			earliest = due
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("timer index: %w", err)
	}
	if !found {
		// No cursor: start at the earliest entry (delivering again rather
		// than skipping), or now when there is none.
		cursor = timerEntry{due: b.opts.Now().UnixMilli()}
		if earliest >= 0 {
			cursor = timerEntry{due: min(earliest, cursor.due)}
		}
	}
	w.cursor = cursor
	w.taken = w.cursor.due / 1000
	w.walking = -1
	b.timers = w
	b.wg.Add(2)
	go func() {
		defer b.wg.Done()
		b.runTimers(bctx)
	}()
	go func() {
		defer b.wg.Done()
		b.takeTimers(bctx)
	}()
	return nil
}

// AppendTimer stores m to be appended to queue index of topic at due (ms).
// It returns the message's place in the timer log (in the topic itself when
// due is not in the future: it is appended at once).
func (b *Broker) AppendTimer(ctx context.Context, topic model.TopicName, index int32, m model.Message, due int64) (model.QueueID, model.QueueOffset, error) {
	now := b.opts.Now()
	if due > now.Add(b.opts.MaxTimerDelay).UnixMilli() {
		return 0, 0, fmt.Errorf("%w: delivery at %d is beyond the longest delay %v", ErrTimerIllegal, due, b.opts.MaxTimerDelay)
	}
	qid, _, err := b.QueueID(topic, index)
	if err != nil {
		return 0, 0, err
	}
	if due <= now.UnixMilli() {
		// Due already: delivered at once.
		offs, err := b.AppendMessages(ctx, topic, index, []model.Message{m})
		if err != nil {
			return 0, 0, err
		}
		return qid, offs[0], nil
	}
	w := b.timers
	m.Headers = append(withoutHeaders(m.Headers, HeaderRealTopic, HeaderRealQueue, HeaderTimerOutMs, headerTimerPrev),
		model.Header{Key: HeaderRealTopic, Value: []byte(topic.String())},
		model.Header{Key: HeaderRealQueue, Value: []byte(strconv.Itoa(int(index)))},
		model.Header{Key: HeaderTimerOutMs, Value: []byte(strconv.FormatInt(due, 10))})
	if m.BornTime == 0 {
		m.BornTime = now.UnixMilli()
	}
	sec := due / 1000
	w.mu.Lock()
	prev, ok := w.heads[sec]
	if !ok {
		prev = -1
	}
	rm := m
	rm.Headers = append(rm.Headers, model.Header{Key: headerTimerPrev, Value: []byte(strconv.FormatInt(int64(prev), 10))})
	// The due time also goes into the index entry's tag-hash slot (the
	// timer queue is never tag-filtered): a restart rebuilds the list heads
	// from the index alone, whose times are monotonic, not per record.
	r := &storage.Record{Queue: w.queue, Format: model.FormatMessage, Count: 1, Timestamp: due, TagHash: uint64(due),
		Payload: EncodeMessage(nil, &rm)}
	for _, k := range m.IndexKeys {
		if k != "" {
			r.Keys = append(r.Keys, storage.Key{Key: []byte(k)})
		}
	}
	// Written under the lock, so each second's list is in log order; the
	// durability wait happens after it.
	tk := b.engine.Ticket()
	if err := b.engine.AppendWith(ctx, []*storage.Record{r}, storage.AppendOptions{NoWait: true}); err != nil {
		w.mu.Unlock()
		return 0, 0, err
	}
	w.heads[sec] = r.BaseOffset
	if sec < w.taken {
		heap.Push(&w.near, timerEntry{due: due, offset: r.BaseOffset})
		w.payloads[r.BaseOffset] = r.Payload
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	if err := b.engine.WaitDurable(ctx, r.Pos+model.LogPos(r.Size), tk); err != nil {
		return 0, 0, err
	}
	return w.queue, r.BaseOffset, nil
}

// runTimers is the delivery loop.
func (b *Broker) runTimers(ctx context.Context) {
	w := b.timers
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	savedCursor, savedAt, saves := w.cursor, time.Time{}, 0
	defer func() {
		// Keep what was delivered up to the stop.
		w.mu.Lock()
		cursor := w.cursor
		w.mu.Unlock()
		if cursor != savedCursor {
			_, _ = b.saveTimerCursor(context.WithoutCancel(ctx), w.cursorQueue, cursor, false, storage.AppendOptions{})
		}
	}()
	for ctx.Err() == nil {
		// Deliver what is due, in batches.
		for ctx.Err() == nil {
			w.mu.Lock()
			var batch []timerEntry
			var payloads [][]byte
			for w.near.Len() > 0 && w.near[0].due <= b.opts.Now().UnixMilli() && len(batch) < timerDeliverBatch {
				e := heap.Pop(&w.near).(timerEntry)
				batch = append(batch, e)
				payloads = append(payloads, w.payloads[e.offset])
				delete(w.payloads, e.offset)
			}
			w.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			if err := b.deliverTimers(ctx, batch, payloads); err != nil {
				w.mu.Lock()
				for i, e := range batch { // kept, so the cursor does not pass them
					heap.Push(&w.near, e)
					w.payloads[e.offset] = payloads[i]
				}
				w.mu.Unlock()
				if ctx.Err() == nil {
					b.log.Warn("timer messages not delivered yet", "count", len(batch), "err", err)
					sleepCtx(ctx, 100*time.Millisecond)
				}
				break
			}
		}
		// Advance and persist the cursor: the first entry not delivered.
		w.mu.Lock()
		// Entries sent from now on are due later than now (AppendTimer
		// delivers due ones at once): so the cursor is the next
		// millisecond (every entry due by now that is not in the heap was
		// delivered), or the first entry in the heap, or the start of the
		// first second not read into the heap yet, whichever comes first.
		cursor := timerEntry{due: b.opts.Now().UnixMilli() + 1}
		if w.near.Len() > 0 && w.near[0].before(cursor) {
			cursor = w.near[0]
		}
		if w.walking >= 0 && w.walking*1000 < cursor.due {
			cursor = timerEntry{due: w.walking * 1000} // a second still being read
		}
		if w.taken*1000 < cursor.due {
			cursor = timerEntry{due: w.taken * 1000} // seconds not read yet (catching up after a restart)
		}
		if cursor.before(w.cursor) {
			cursor = w.cursor // never backwards: what it passed was delivered
		}
		for sec := w.cursor.due / 1000; sec < cursor.due/1000; sec++ {
			delete(w.heads, sec)
		}
		w.cursor = cursor
		next := b.opts.Now().Add(time.Second)
		if w.near.Len() > 0 {
			if due := time.UnixMilli(w.near[0].due); due.Before(next) {
				next = due
			}
		}
		w.mu.Unlock()
		// A saved cursor behind the real one only means more messages
		// delivered again after a crash, so saves are spaced out.
		if cursor != savedCursor && b.opts.Now().Sub(savedAt) >= timerCursorSaveEvery {
			saves++
			if _, err := b.saveTimerCursor(ctx, w.cursorQueue, cursor, saves%timerCursorTrimEvery == 0, storage.AppendOptions{Deferred: true}); err == nil {
				savedCursor, savedAt = cursor, b.opts.Now()
			} else if ctx.Err() == nil {
				b.log.Warn("timer cursor not saved", "err", err)
			}
		}
		t.Reset(max(next.Sub(b.opts.Now()), time.Millisecond))
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-w.wake:
		}
	}
}

// takeTimers takes each second a lookahead before it starts, walking its
// list into the heap, apart from the delivery loop so a long list never
// holds up deliveries.
func (b *Broker) takeTimers(ctx context.Context) {
	w := b.timers
	for ctx.Err() == nil {
		w.mu.Lock()
		sec := w.taken
		if wait := time.UnixMilli(sec * 1000).Add(-timerLookahead).Sub(b.opts.Now()); wait > 0 {
			w.mu.Unlock()
			sleepCtx(ctx, wait)
			continue
		}
		head, ok := w.heads[sec]
		w.taken++
		if ok {
			w.walking = sec
		}
		w.mu.Unlock()
		if ok {
			b.takeTimerSecond(ctx, head) // (resets walking as it pushes)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

// takeTimerSecond walks one second's list from its head into the heap.
func (b *Broker) takeTimerSecond(ctx context.Context, head model.QueueOffset) {
	w := b.timers
	// The head may have been appended a moment ago and not be durable
	// (readable) yet: AppendTimer waits for durability after linking it.
	// Reading it before would break the list and lose the second's entries.
	for ctx.Err() == nil {
		_, hw, _, err := b.engine.Offsets(w.queue)
		if err != nil || hw > head {
			break
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = b.engine.Wait(wctx, map[model.QueueID]model.QueueOffset{w.queue: head})
		cancel()
	}
	w.mu.Lock()
	cursor := w.cursor
	w.mu.Unlock()
	var loaded []timerEntry
	recalled := map[model.QueueOffset]bool{}
	payloads := map[model.QueueOffset][]byte{}
	for off := head; off >= 0 && ctx.Err() == nil; {
		due, prev, cancels, payload, err := b.timerEntryAt(off)
		if err != nil {
			b.log.Error("timer list broken: entries of this second before it are lost", "offset", off, "err", err)
			break
		}
		e := timerEntry{due: due, offset: off}
		switch {
		case cancels >= 0:
			recalled[cancels] = true // a tombstone: met before the entry it cancels
		case recalled[off]:
		case !e.before(cursor): // (entries before the cursor were delivered before a restart)
			loaded = append(loaded, e)
			payloads[off] = payload
		}
		off = prev
	}
	w.mu.Lock()
	w.walking = -1 // in the same critical section as the push: a recall sees one or the other
	for t := range recalled {
		delete(w.cancelled, t)
	}
	for _, e := range loaded {
		if w.cancelled[e.offset] {
			delete(w.cancelled, e.offset) // recalled while this second was walked
			continue
		}
		heap.Push(&w.near, e)
		w.payloads[e.offset] = payloads[e.offset]
	}
	w.mu.Unlock()
}

// timerEntryAt reads an entry's due time, the previous entry of its second,
// for a tombstone the entry it cancels (-1 otherwise), and its payload.
func (b *Broker) timerEntryAt(off model.QueueOffset) (int64, model.QueueOffset, model.QueueOffset, []byte, error) {
	payload, due, err := b.timerPayloadAt(off)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	m, err := DecodeMessage(payload)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	v, _ := m.Header(headerTimerPrev)
	prev, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("%w: timer entry %d without a previous entry", model.ErrCorruptRecord, off)
	}
	cancels := int64(-1)
	if c, ok := m.Header(headerTimerCancel); ok {
		if cancels, err = strconv.ParseInt(string(c), 10, 64); err != nil {
			return 0, 0, 0, nil, fmt.Errorf("%w: timer tombstone %d", model.ErrCorruptRecord, off)
		}
	}
	return due, model.QueueOffset(prev), model.QueueOffset(cancels), payload, nil
}

// deliverTimers appends due timer messages to their real topics, in order,
// one append per run of messages with the same destination.
func (b *Broker) deliverTimers(ctx context.Context, batch []timerEntry, payloads [][]byte) error {
	type dest struct {
		topic model.TopicName
		queue int32
	}
	var run []model.Message
	var runDest dest
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		fired := b.opts.Now().UnixMilli() // (before consumers can see them)
		offs, err := b.AppendMessages(ctx, runDest.topic, runDest.queue, run)
		if err == nil {
			if t, terr := b.Topic(runDest.topic); terr == nil && b.Traced(t, "") {
				for i := range run {
					b.TraceMessage(t, runDest.queue, offs[i], &run[i], TraceEvent{Time: fired, Kind: TraceTimerFired, Protocol: "broker"})
				}
			}
		}
		if errors.Is(err, model.ErrUnknownTopic) || errors.Is(err, model.ErrUnknownQueue) {
			b.log.Warn("timer messages for a deleted topic dropped", "topic", runDest.topic.String(), "count", len(run))
			err = nil
		}
		run = run[:0]
		return err
	}
	for i, e := range batch {
		payload := payloads[i]
		if payload == nil {
			var err error
			if payload, _, err = b.timerPayloadAt(e.offset); errors.Is(err, model.ErrOffsetOutOfRange) {
				b.log.Warn("timer message gone before it was due (retention)", "offset", e.offset)
				continue
			} else if err != nil {
				return err
			}
		}
		m, err := DecodeMessage(payload)
		if err != nil {
			b.log.Error("corrupt timer message dropped", "offset", e.offset, "err", err)
			continue
		}
		realTopic, _ := m.Header(HeaderRealTopic)
		realQueue, _ := m.Header(HeaderRealQueue)
		name, err := model.ParseTopicName(string(realTopic))
		if err != nil {
			b.log.Error("timer message without a valid destination dropped", "offset", e.offset, "topic", string(realTopic))
			continue
		}
		q, _ := strconv.Atoi(string(realQueue))
		m.Headers = withoutHeaders(m.Headers, HeaderDelayLevel, headerTimerPrev)
		if d := (dest{name, int32(q)}); d != runDest {
			if err := flush(); err != nil {
				return err
			}
			runDest = d
		}
		run = append(run, m)
	}
	return flush()
}

// saveTimerCursor appends the cursor to the cursor log and, when trim is
// set, drops the saves before it. The loop's saves are deferred (one lost to
// an operating-system crash only delivers a few messages again); the last
// one at a stop and a migrated one are durable.
func (b *Broker) saveTimerCursor(ctx context.Context, q model.QueueID, cursor timerEntry, trim bool, opts storage.AppendOptions) (model.QueueOffset, error) {
	r := &storage.Record{Queue: q, Format: model.FormatInternal, Count: 1, Payload: []byte(cursor.String())}
	if err := b.engine.AppendWith(ctx, []*storage.Record{r}, opts); err != nil {
		return 0, err
	}
	if trim {
		return r.BaseOffset, b.engine.SetStartOffset(q, r.BaseOffset)
	}
	return r.BaseOffset, nil
}

// loadTimerCursor reads the newest cursor save (or the one older versions
// kept in the metadata store, moved into the cursor log); found is false
// when there is none.
func (b *Broker) loadTimerCursor(ctx context.Context, q model.QueueID) (cursor timerEntry, found bool, err error) {
	start, hw, _, err := b.engine.Offsets(q)
	if err != nil {
		return cursor, false, err
	}
	for off := hw - 1; off >= start && !found; off-- {
		res, err := b.engine.Read(q, off, storage.ReadOptions{MaxRecords: 1})
		if err != nil {
			return cursor, false, fmt.Errorf("timer cursor: %w", err)
		}
		if len(res.Records) > 0 {
			if c, perr := parseTimerCursor(string(res.Records[0].Payload)); perr == nil {
				cursor, found = c, true
			}
		}
		res.Release()
	}
	if found {
		return cursor, true, nil
	}
	kv, err := b.meta.Get(ctx, legacyTimerCursorKey)
	if errors.Is(err, meta.ErrNotFound) {
		return cursor, false, nil
	}
	if err != nil {
		return cursor, false, fmt.Errorf("timer cursor: %w", err)
	}
	if cursor, err = parseTimerCursor(string(kv.Value)); err != nil {
		return cursor, false, nil
	}
	if _, err := b.saveTimerCursor(ctx, q, cursor, false, storage.AppendOptions{}); err != nil {
		return cursor, false, err
	}
	if err := meta.Delete(ctx, b.meta, legacyTimerCursorKey); err != nil {
		return cursor, false, err
	}
	return cursor, true, nil
}
