package broker

// Message trace: lifecycle events the broker records for the messages of
// traced topics, whatever protocol moved them — produced (where stored, by
// which producer), delivered (to which group and client, which attempt),
// acknowledged, sent back for a retry, dead-lettered, delivered by a timer,
// committed or rolled back as a transaction. Events are messages of one
// internal topic (system/internal/trace), indexed in the key index under
// the message's id and its place in its queue, so a message's events are
// found by either; they expire with that topic's retention.
//
// Cost is bounded: only topics whose config says so (rosetta.message.trace,
// or every topic with Options.TraceAll) are traced, a sample of their
// messages when Options.TraceSample < 1 (decided by the message id, so a
// message is traced through its whole life or not at all), and events go
// through a bounded queue to one writer that appends them in batches
// without syncs of their own: when the writer falls behind, events are
// dropped and counted, never waited for.

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Trace event kinds.
const (
	TraceProduced     = "produced"
	TraceDelivered    = "delivered"
	TraceAcknowledged = "acknowledged"
	TraceRetried      = "retried"
	TraceDeadLettered = "dead-lettered"
	TraceTimerFired   = "timer fired"
	TraceCommitted    = "transaction committed"
	TraceRolledBack   = "transaction rolled back"
)

// TraceEvent is one step of a message's life.
type TraceEvent struct {
	Time     int64  `json:"time_ms"`
	Kind     string `json:"kind"`
	ID       string `json:"id,omitempty"` // the message's unique id (UNIQ_KEY), when it has one
	Topic    string `json:"topic"`
	Queue    int32  `json:"queue"`
	Offset   int64  `json:"offset"`             // -1: not stored in its topic yet (waiting)
	Protocol string `json:"protocol,omitempty"` // kafka, remoting, grpc, admin, broker
	Group    string `json:"group,omitempty"`    // producer or consumer group
	Client   string `json:"client,omitempty"`   // client id or address
	Attempt  int32  `json:"attempt,omitempty"`  // delivery attempt (1: the first)
	Detail   string `json:"detail,omitempty"`
	// Origin is where a message without an id was first stored
	// ("topic@queue:offset"): events of its retried and dead-lettered
	// copies are found through it.
	Origin string `json:"origin,omitempty"`
}

// TopicConfigMessageTrace is the topic config that turns tracing on.
const TopicConfigMessageTrace = "true"

var traceTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "trace"}

// traceQueueSize bounds the events waiting for the writer; traceBatch the
// events one append carries.
const (
	traceQueueSize = 8192
	traceBatch     = 512
)

// traceRetention is how long events are kept unless Options.TraceRetention
// says otherwise.
const traceRetention = 3 * 24 * time.Hour

// tracer is the broker's event recorder.
type tracer struct {
	events   chan TraceEvent
	recorded atomic.Int64
	dropped  atomic.Int64
}

// TraceStats are the recorder's counters since start.
type TraceStats struct{ Recorded, Dropped int64 }

// TraceStats reports how many events were recorded and dropped.
func (b *Broker) TraceStats() TraceStats {
	if b.trace == nil {
		return TraceStats{}
	}
	return TraceStats{Recorded: b.trace.recorded.Load(), Dropped: b.trace.dropped.Load()}
}

// startTrace creates the trace topic and starts its writer.
func (b *Broker) startTrace(ctx, bctx context.Context) error {
	retention := b.opts.TraceRetention
	if retention <= 0 {
		retention = traceRetention
	}
	if _, err := b.EnsureInternalTopic(ctx, traceTopic, 1, TopicConfig{RetentionMs: retention.Milliseconds()}); err != nil {
		return err
	}
	b.trace = &tracer{events: make(chan TraceEvent, traceQueueSize)}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.writeTrace(bctx)
	}()
	return nil
}

// Traced reports whether messages of t are traced, and of those the one
// with id — its unique id, or for a message without one the place it was
// first stored (an empty id: any of them).
func (b *Broker) Traced(t *Topic, id string) bool {
	if b.trace == nil || t == nil || t.Name.Tenant == traceTopic.Tenant && t.Name.Namespace == traceTopic.Namespace {
		return false
	}
	if !b.opts.TraceAll && t.Config.MessageTrace != TopicConfigMessageTrace {
		return false
	}
	if id != "" {
		return b.sampled(fnv32a(id))
	}
	return true
}

// sampled says whether the message whose id hashes to h is in the
// configured sample.
func (b *Broker) sampled(h uint32) bool {
	s := b.opts.TraceSample
	return s <= 0 || s >= 1 || float64(h)/float64(1<<32) < s
}

// fnv32a is FNV-1a of a string or bytes (the hash the sample is chosen by).
func fnv32a[S string | []byte](s S) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// TraceMessage records an event of message m, stored (or about to be) at
// offset of queue of t, when t and m are traced; ev names the rest.
func (b *Broker) TraceMessage(t *Topic, queue int32, offset model.QueueOffset, m *model.Message, ev TraceEvent) {
	if !b.Traced(t, "") && !strings.HasPrefix(t.Name.Topic, RetryTopicPrefix) {
		return // (before reading headers: delivery paths call this per message)
	}
	id := ""
	if m != nil {
		if v, ok := m.Header(HeaderUniqKey); ok {
			id = string(v)
		}
	}
	// A message without an id (a Kafka record) is sampled by the place it
	// was first stored, so its events are kept or dropped together; an
	// event of a message not at hand (m nil) is kept.
	key := id
	if key == "" && m != nil {
		key = ev.Origin
		if key == "" && offset >= 0 {
			key = tracePlace(t.Name.Short(), queue, int64(offset))
		}
	}
	if !b.Traced(t, key) && !b.tracedOrigin(t, m, key) {
		return
	}
	ev.ID, ev.Topic, ev.Queue, ev.Offset = id, t.Name.Short(), queue, int64(offset)
	b.recordTrace(ev)
}

// TraceRecord records an event of the record at offset of queue of t, a
// message known to have no id (a Kafka record), when t and it are traced:
// sampled by its place, hashed without building the place's key (Kafka
// paths call this per record).
func (b *Broker) TraceRecord(t *Topic, queue int32, offset model.QueueOffset, ev TraceEvent) {
	if !b.Traced(t, "") {
		return
	}
	var buf [128]byte
	if !b.sampled(fnv32a(appendTracePlace(buf[:0], t.Name.Short(), queue, int64(offset)))) {
		return
	}
	ev.Topic, ev.Queue, ev.Offset = t.Name.Short(), queue, int64(offset)
	b.recordTrace(ev)
}

// tracedOrigin reports whether m, read from a group's retry topic t, came
// from a traced topic (its RETRY_TOPIC).
func (b *Broker) tracedOrigin(t *Topic, m *model.Message, id string) bool {
	if m == nil || !strings.HasPrefix(t.Name.Topic, RetryTopicPrefix) {
		return false
	}
	v, ok := m.Header(HeaderRetryTopic)
	if !ok {
		return false
	}
	name, err := model.ParseTopicName(string(v))
	if err != nil {
		return false
	}
	origin, err := b.Topic(name)
	return err == nil && b.Traced(origin, id)
}

// recordTrace queues an event for the writer, or drops it when the writer
// is behind.
func (b *Broker) recordTrace(ev TraceEvent) {
	if ev.Time == 0 {
		ev.Time = b.opts.Now().UnixMilli()
	}
	select {
	case b.trace.events <- ev:
	default:
		b.trace.dropped.Add(1)
	}
}

// writeTrace appends queued events in batches until ctx ends (then what is
// queued).
func (b *Broker) writeTrace(ctx context.Context) {
	batch := make([]TraceEvent, 0, traceBatch)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		recs := make([]*storage.Record, len(batch))
		slab := make([]storage.Record, len(batch))
		now := b.opts.Now().UnixMilli()
		for i, ev := range batch {
			body, _ := json.Marshal(ev)
			m := model.Message{Body: body, IndexKeys: traceKeys(ev)}
			messageRecord(&slab[i], &m, now)
			recs[i] = &slab[i]
		}
		err := b.Append(context.WithoutCancel(ctx), traceTopic, 0, recs, storage.AppendOptions{Deferred: true})
		if err != nil {
			b.trace.dropped.Add(int64(len(batch)))
			b.log.Debug("trace events not recorded", "count", len(batch), "err", err)
		} else {
			b.trace.recorded.Add(int64(len(batch)))
		}
		batch = batch[:0]
	}
	for {
		select {
		case ev := <-b.trace.events:
			batch = append(batch, ev)
			for len(batch) < traceBatch {
				select {
				case ev := <-b.trace.events:
					batch = append(batch, ev)
					continue
				default:
				}
				break
			}
			flush()
		case <-ctx.Done():
			for {
				select {
				case ev := <-b.trace.events:
					batch = append(batch, ev)
					if len(batch) == traceBatch {
						flush()
					}
					continue
				default:
				}
				flush()
				return
			}
		}
	}
}

// traceKeys are the keys an event is found by: the message's id and its
// place ("<topic>@<queue>:<offset>", for events that know the place but
// not the id).
func traceKeys(ev TraceEvent) []string {
	keys := make([]string, 0, 2)
	if ev.ID != "" {
		keys = append(keys, ev.ID)
	}
	if ev.Offset >= 0 {
		keys = append(keys, tracePlace(ev.Topic, ev.Queue, ev.Offset))
	}
	if ev.Origin != "" {
		keys = append(keys, ev.Origin)
	}
	return keys
}

func tracePlace(topic string, queue int32, offset int64) string {
	var buf [128]byte
	return string(appendTracePlace(buf[:0], topic, queue, offset))
}

func appendTracePlace(b []byte, topic string, queue int32, offset int64) []byte {
	b = append(b, topic...)
	b = append(b, '@')
	b = strconv.AppendInt(b, int64(queue), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, offset, 10)
}

// MessageTrace returns the recorded events of the message with id (its
// UNIQ_KEY), or — given topic, queue and offset — of the message stored
// there, in time order (at most max).
func (b *Broker) MessageTrace(id, topic string, queue int32, offset int64, max int) ([]TraceEvent, error) {
	if max <= 0 {
		max = 1000
	}
	t, err := b.Topic(traceTopic)
	if err != nil {
		return nil, nil // nothing was ever traced
	}
	q := t.Queues[0]
	seen := map[model.QueueOffset]bool{}
	var out []TraceEvent
	places := map[string]bool{}
	lookup := func(key string) error {
		for _, h := range b.LookupKey([]byte(key), max, 0, 0) {
			if h.Queue != q || seen[h.Offset] || len(out) >= max {
				continue
			}
			seen[h.Offset] = true
			ev, err := b.traceEventAt(q, h.Offset)
			if err != nil {
				continue // expired under the lookup
			}
			out = append(out, ev)
			if ev.Offset >= 0 {
				places[tracePlace(ev.Topic, ev.Queue, ev.Offset)] = true
			}
		}
		return nil
	}
	if id != "" {
		if err := lookup(id); err != nil {
			return nil, err
		}
	}
	if topic != "" && offset >= 0 {
		places[tracePlace(topic, queue, offset)] = true
	}
	// Events that know only the place (acknowledgements by offset).
	for p := range places {
		if err := lookup(p); err != nil {
			return nil, err
		}
	}
	// In time order; events of one millisecond in lifecycle order (a
	// delivery can be recorded before the timer or commit that made the
	// message visible).
	slices.SortStableFunc(out, func(a, b TraceEvent) int {
		return cmp.Or(cmp.Compare(a.Time, b.Time), cmp.Compare(traceRank[a.Kind], traceRank[b.Kind]))
	})
	return out, nil
}

// traceRank orders the kinds of a message's life.
var traceRank = map[string]int{TraceProduced: 0, TraceTimerFired: 1, TraceCommitted: 1, TraceRolledBack: 1,
	TraceDelivered: 2, TraceAcknowledged: 3, TraceRetried: 3, TraceDeadLettered: 4}

// traceEventAt reads one recorded event.
func (b *Broker) traceEventAt(q model.QueueID, off model.QueueOffset) (TraceEvent, error) {
	res, err := b.engine.Read(q, off, storage.ReadOptions{MaxRecords: 1})
	if err != nil {
		return TraceEvent{}, err
	}
	defer res.Release()
	if len(res.Records) == 0 || res.Records[0].BaseOffset != off {
		return TraceEvent{}, model.ErrNotFound
	}
	m, err := DecodeMessage(res.Records[0].Payload)
	if err != nil {
		return TraceEvent{}, err
	}
	var ev TraceEvent
	err = json.Unmarshal(m.Body, &ev)
	return ev, err
}

// traceSourceKey carries who made a request, for trace events.
type traceSourceKey struct{}

// TraceSource is the protocol and client behind a request.
type TraceSource struct{ Protocol, Client string }

// WithTraceSource returns ctx naming the protocol and client its work
// comes from; events recorded under it say so.
func WithTraceSource(ctx context.Context, protocol, client string) context.Context {
	return context.WithValue(ctx, traceSourceKey{}, TraceSource{Protocol: protocol, Client: client})
}

type traceOriginKey struct{}

// WithTraceOrigin returns ctx naming where the message its work moves was
// first stored (queue index of topic, offset): a message without an id
// (a Kafka record) moved to a retry or dead-letter topic is traced under
// that place.
func WithTraceOrigin(ctx context.Context, topic model.TopicName, queue int32, offset model.QueueOffset) context.Context {
	return context.WithValue(ctx, traceOriginKey{}, TracePlace(topic, queue, offset))
}

// TracePlace is the key of a message's place in its topic, for
// TraceEvent.Origin.
func TracePlace(topic model.TopicName, queue int32, offset model.QueueOffset) string {
	return tracePlace(topic.Short(), queue, int64(offset))
}

func traceSource(ctx context.Context) TraceSource {
	s, _ := ctx.Value(traceSourceKey{}).(TraceSource)
	return s
}

// TraceQueue records an event for the message at offset of storage queue
// q; m may be nil when it is not at hand (the event is then found through
// the message's place).
func (b *Broker) TraceQueue(ctx context.Context, q model.QueueID, offset model.QueueOffset, m *model.Message, ev TraceEvent) {
	if b.trace == nil {
		return
	}
	ref, err := b.QueueByID(q)
	if err != nil {
		return
	}
	if src := traceSource(ctx); ev.Protocol == "" {
		ev.Protocol = src.Protocol
		if ev.Client == "" {
			ev.Client = src.Client
		}
	}
	b.TraceMessage(ref.Topic, ref.Index, offset, m, ev)
}

// traceMoved records an event of a message moved out of the topic it was
// consumed from (to a retry or dead-letter topic, where it is now at
// offset of queue of dest), when that topic is traced.
func (b *Broker) traceMoved(ctx context.Context, origin *model.TopicName, dest *Topic, queue int32, offset model.QueueOffset, m *model.Message, ev TraceEvent) {
	if b.trace == nil {
		return
	}
	if origin == nil {
		v, ok := m.Header(HeaderRetryTopic)
		if !ok {
			return
		}
		name, err := model.ParseTopicName(string(v))
		if err != nil {
			return
		}
		origin = &name
	}
	from, err := b.Topic(*origin)
	if err != nil {
		return
	}
	id, _ := m.Header(HeaderUniqKey)
	key := string(id)
	if len(id) == 0 {
		ev.Origin, _ = ctx.Value(traceOriginKey{}).(string)
		key = ev.Origin
	}
	if !b.Traced(from, key) {
		return
	}
	src := traceSource(ctx)
	ev.ID, ev.Topic, ev.Queue, ev.Offset = string(id), dest.Name.Short(), queue, int64(offset)
	if ev.Protocol == "" {
		ev.Protocol, ev.Client = src.Protocol, src.Client
	}
	if ev.Detail == "" {
		ev.Detail = "from " + from.Name.Short()
	}
	b.recordTrace(ev)
}
