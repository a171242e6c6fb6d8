package pulsar

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// producer is one PRODUCER of a connection: its sends are appended in
// the order they arrive and answered in that order, each once durable.
type producer struct {
	c       *conn
	id      uint64
	name    string
	topic   model.TopicName
	index   int32
	queue   model.QueueID
	meta    map[string]string
	since   time.Time
	pending chan receipt
	done    chan struct{}
	once    sync.Once
}

// receipt is a SEND waiting for its answer.
type receipt struct {
	seq, highest uint64
	res          produce.Result
	ledger       uint64
	dup          bool
	err          error
}

// producerNames names producers that bring no name: unique across
// restarts and servers (names key de-duplication).
type producerNames struct {
	prefix string
	count  atomic.Uint64
}

func newProducerNames() *producerNames {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &producerNames{prefix: "rosetta-" + hex.EncodeToString(b[:])}
}

func (n *producerNames) next() string { return fmt.Sprintf("%s-%d", n.prefix, n.count.Add(1)) }

// ledgerID is the ledger id of every entry of a topic: its creation time,
// so a topic deleted and made again has higher ids than before.
func ledgerID(t *broker.Topic) uint64 { return uint64(max(t.CreatedMs, 1)) }

// handleProducer registers a producer and tells it the highest sequence id
// its name has stored, where it resumes.
func (c *conn) handleProducer(m *pulsarpb.CommandProducer) {
	if ref, err := ParseTopic(m.GetTopic()); err == nil && !c.allowed(m.GetRequestId(), ref.Name, security.OpWrite, "") {
		return
	}
	tg, err := c.topicFor(m.GetTopic())
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	name := m.GetProducerName()
	if name == "" {
		name = c.s.names.next()
	}
	t, index := tg.topic, tg.index
	q, _ := t.Queue(index)
	last, err := c.s.dedup.lastSequence(q, name)
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	p := &producer{c: c, id: m.GetProducerId(), name: name, topic: t.Name, index: index, queue: q,
		meta: keyValues(m.GetMetadata()), since: time.Now(), pending: make(chan receipt, 1024), done: make(chan struct{})}
	c.mu.Lock()
	old := c.producers[p.id]
	c.mu.Unlock()
	if old != nil {
		// A retried PRODUCER of a producer already registered.
		c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pulsarpb.CommandProducerSuccess{
			RequestId: proto.Uint64(m.GetRequestId()), ProducerName: proto.String(old.name), LastSequenceId: proto.Int64(last),
			SchemaVersion: []byte{}, ProducerReady: proto.Bool(true)}})
		return
	}
	if sub := m.GetInitialSubscriptionName(); sub != "" {
		// A dead-letter producer's topic keeps its messages for the
		// subscription its consumers will use.
		if err := c.s.ensureSubscription(c.ctx, t, index, sub); err != nil {
			c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
			return
		}
	}
	if !c.s.live.addProducer(p) {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_ProducerBusy,
			fmt.Sprintf("producer %s is already connected to %s", name, m.GetTopic()))
		return
	}
	c.mu.Lock()
	c.producers[p.id] = p
	c.mu.Unlock()
	go p.run()
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER_SUCCESS.Enum(), ProducerSuccess: &pulsarpb.CommandProducerSuccess{
		RequestId: proto.Uint64(m.GetRequestId()), ProducerName: proto.String(name), LastSequenceId: proto.Int64(last),
		SchemaVersion: []byte{}, ProducerReady: proto.Bool(true)}})
}

// handleSend stores a SEND's messages as one batch, unless the producer
// stored them already.
func (c *conn) handleSend(m *pulsarpb.CommandSend, f *Frame) {
	c.mu.Lock()
	p := c.producers[m.GetProducerId()]
	c.mu.Unlock()
	if p == nil {
		c.sendError(m.GetProducerId(), m.GetSequenceId(), pulsarpb.ServerError_NotAllowedError, "no such producer")
		return
	}
	r := receipt{seq: m.GetSequenceId(), highest: max(m.GetSequenceId(), m.GetHighestSequenceId())}
	r.ledger, r.res, r.dup, r.err = c.s.store(c, p, f, r.seq, r.highest)
	select {
	case p.pending <- r:
	case <-p.done:
	}
}

// store appends a SEND to its queue, or finds it a duplicate.
func (s *Server) store(c *conn, p *producer, f *Frame, first, last uint64) (uint64, produce.Result, bool, error) {
	var res produce.Result
	t, err := s.b.Topic(p.topic)
	if err != nil {
		return 0, res, false, err
	}
	q, ok := t.Queue(p.index)
	if !ok {
		return 0, res, false, model.ErrUnknownQueue
	}
	recs, noEvent, err := DecodeSend(f.Metadata, f.Payload)
	if err != nil {
		return 0, res, false, err
	}
	batch, err := s.batches.Build(kafkaCodec(f.Metadata.GetCompression()), recs)
	if err != nil {
		return 0, res, false, err
	}
	qs, err := s.dedup.lock(q)
	if err != nil {
		return 0, res, false, err
	}
	defer qs.mu.Unlock()
	if prev, ok := qs.last[p.name]; ok && int64(last) <= prev {
		return ledgerID(t), res, true, nil
	}
	res, err = s.appender.AppendKeyed(c.ctx, t, p.index, batch, "", identity{name: p.name, first: first, last: last,
		publish: f.Metadata.GetPublishTime(), noEvent: noEvent}.key())
	if err == nil {
		qs.last[p.name] = int64(last)
	}
	return ledgerID(t), res, false, err
}

// run answers the producer's sends in order, each once durable.
func (p *producer) run() {
	for {
		select {
		case <-p.done:
			return
		case r := <-p.pending:
			err := r.err
			if err == nil && !r.dup {
				err = p.c.s.appender.WaitDurable(p.c.ctx, r.res)
			}
			if err != nil {
				p.c.log.Info("pulsar: send failed", "producer", p.name, "topic", p.topic.String(), "err", err)
				p.c.sendError(p.id, r.seq, errorCode(err), err.Error())
				continue
			}
			id := &pulsarpb.MessageIdData{LedgerId: proto.Uint64(r.ledger), EntryId: proto.Uint64(uint64(r.res.BaseOffset))}
			if r.dup {
				id = &pulsarpb.MessageIdData{LedgerId: proto.Uint64(^uint64(0)), EntryId: proto.Uint64(^uint64(0))}
			}
			p.c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND_RECEIPT.Enum(), SendReceipt: &pulsarpb.CommandSendReceipt{
				ProducerId: proto.Uint64(p.id), SequenceId: proto.Uint64(r.seq), HighestSequenceId: proto.Uint64(r.highest), MessageId: id}})
		}
	}
}

func (p *producer) close() {
	p.once.Do(func() {
		close(p.done)
		p.c.s.live.removeProducer(p)
	})
}

// keyValues turns protocol key-value pairs into a map.
func keyValues(kvs []*pulsarpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = kv.GetValue()
	}
	return out
}

// liveProducers are the connected producers by queue, for stats and
// ProducerBusy.
type liveProducers struct {
	mu sync.Mutex
	m  map[model.QueueID]map[string]*producer
}

// addProducer registers p unless another producer of its name is
// connected to its queue.
func (l *liveProducers) addProducer(p *producer) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[model.QueueID]map[string]*producer{}
	}
	names := l.m[p.queue]
	if names == nil {
		names = map[string]*producer{}
		l.m[p.queue] = names
	}
	if names[p.name] != nil {
		return false
	}
	names[p.name] = p
	return true
}

func (l *liveProducers) removeProducer(p *producer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[p.queue][p.name] == p {
		delete(l.m[p.queue], p.name)
	}
}

// producersOf lists the producers connected to a queue.
func (l *liveProducers) producersOf(q model.QueueID) []*producer {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*producer, 0, len(l.m[q]))
	for _, p := range l.m[q] {
		out = append(out, p)
	}
	return out
}

// closeProducer closes a producer from the broker's side: the client
// registers it again.
func (c *conn) closeProducer(p *producer) {
	c.mu.Lock()
	if c.producers[p.id] == p {
		delete(c.producers, p.id)
	}
	c.mu.Unlock()
	p.close()
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_PRODUCER.Enum(), CloseProducer: &pulsarpb.CommandCloseProducer{
		ProducerId: proto.Uint64(p.id), RequestId: proto.Uint64(0)}})
}

// handleCloseProducer drops a producer.
func (c *conn) handleCloseProducer(m *pulsarpb.CommandCloseProducer) {
	c.mu.Lock()
	p := c.producers[m.GetProducerId()]
	delete(c.producers, m.GetProducerId())
	c.mu.Unlock()
	if p != nil {
		p.close()
	}
	c.success(m.GetRequestId())
}
