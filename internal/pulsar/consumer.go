package pulsar

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// consumer is one SUBSCRIBE of a connection.
type consumer struct {
	c        *conn
	id       uint64
	name     string
	priority int32
	meta     map[string]string
	since    time.Time
	sub      cursor
	permits  int64                            // guarded by the subscription's lock
	held     map[model.QueueOffset]pop.Handle // Shared: messages handed to it, not acknowledged
	pending  []pop.Delivery                   // Key_Shared: its messages waiting for permits
	sticky   [][2]int32                       // Key_Shared STICKY: the hash ranges it takes
	once     sync.Once
}

// handleSubscribe attaches a consumer to its subscription.
func (c *conn) handleSubscribe(m *pulsarpb.CommandSubscribe) {
	if ref, err := ParseTopic(m.GetTopic()); err == nil && !c.allowed(m.GetRequestId(), ref.Name, security.OpRead, m.GetSubscription()) {
		return
	}
	tg, err := c.topicFor(m.GetTopic())
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	switch m.GetSubType() {
	case pulsarpb.CommandSubscribe_Exclusive, pulsarpb.CommandSubscribe_Failover, pulsarpb.CommandSubscribe_Shared,
		pulsarpb.CommandSubscribe_Key_Shared:
	default:
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_NotAllowedError, "unknown subscription type "+m.GetSubType().String())
		return
	}
	if m.GetSubscription() == "" {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_InvalidTopicName, "empty subscription name")
		return
	}

	co := &consumer{c: c, id: m.GetConsumerId(), name: m.GetConsumerName(), priority: m.GetPriorityLevel(),
		meta: keyValues(m.GetMetadata()), since: time.Now()}
	c.mu.Lock()
	delete(c.closed, co.id)
	c.mu.Unlock()
	c.mu.Lock()
	old := c.consumers[co.id]
	c.mu.Unlock()
	if old != nil {
		// A retried SUBSCRIBE of a consumer already attached.
		c.success(m.GetRequestId())
		return
	}
	c.mu.Lock()
	c.consumers[co.id] = co
	c.mu.Unlock()
	sub, err := c.s.subs.attach(co, m, tg)
	if err != nil {
		c.mu.Lock()
		delete(c.consumers, co.id)
		c.mu.Unlock()
		code := errorCode(err)
		if errors.Is(err, ErrConsumerBusy) || code == pulsarpb.ServerError_UnknownError {
			code = pulsarpb.ServerError_ConsumerBusy
		}
		c.errorReply(m.GetRequestId(), code, err.Error())
		return
	}
	co.sub = sub
	c.success(m.GetRequestId())
}

// consumerOf finds a consumer of the connection.
func (c *conn) consumerOf(id uint64) *consumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	co := c.consumers[id]
	if co == nil || co.sub == nil {
		return nil
	}
	return co
}

// handleFlow adds permits.
func (c *conn) handleFlow(m *pulsarpb.CommandFlow) {
	co := c.consumerOf(m.GetConsumerId())
	if co == nil {
		return
	}
	co.sub.flow(co, int64(m.GetMessagePermits()))
}

// handleAck applies acknowledgements (answered when they ask for it).
func (c *conn) handleAck(m *pulsarpb.CommandAck) {
	co := c.consumerOf(m.GetConsumerId())
	if co != nil {
		co.sub.ack(co, m)
	}
	if m.RequestId != nil {
		resp := &pulsarpb.CommandAckResponse{ConsumerId: proto.Uint64(m.GetConsumerId()), RequestId: proto.Uint64(m.GetRequestId())}
		if co == nil {
			resp.Error, resp.Message = pulsarpb.ServerError_ConsumerNotFound.Enum(), proto.String("no such consumer")
		}
		c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK_RESPONSE.Enum(), AckResponse: resp})
	}
}

// handleRedeliver sends unacknowledged messages again.
func (c *conn) handleRedeliver(m *pulsarpb.CommandRedeliverUnacknowledgedMessages) {
	if co := c.consumerOf(m.GetConsumerId()); co != nil {
		co.sub.redeliver(co, m.GetMessageIds())
	}
}

// handleSeek resets the subscription to a message id or a publish time,
// then closes the consumer (the client subscribes again from there).
func (c *conn) handleSeek(m *pulsarpb.CommandSeek) {
	co := c.consumerOf(m.GetConsumerId())
	if co == nil {
		c.seekClosed(m)
		return
	}
	sub := co.sub.base()
	off, err := c.s.seekOffset(sub, m)
	if err == nil {
		err = co.sub.seek(c.ctx, off)
	}
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	c.success(m.GetRequestId())
	c.closeConsumer(co)
}

// seekClosed answers a SEEK for a consumer the broker has just closed
// (after an earlier seek, before the client subscribed again): a durable
// subscription moves; a reader subscribes again from the id it sought.
func (c *conn) seekClosed(m *pulsarpb.CommandSeek) {
	c.mu.Lock()
	sb, ok := c.closed[m.GetConsumerId()]
	c.mu.Unlock()
	if !ok {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	var err error
	if sb.durable {
		var off model.QueueOffset
		var t *broker.Topic
		if off, err = c.s.seekOffset(sb, m); err == nil {
			t, err = c.s.b.Topic(sb.topic)
		}
		if err == nil {
			err = c.s.setPosition(c.ctx, t, sb.index, sb.key.name, off)
		}
	}
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	c.success(m.GetRequestId())
}

// seekOffset is the offset a SEEK names on a subscription's queue.
func (s *Server) seekOffset(sub *subBase, m *pulsarpb.CommandSeek) (model.QueueOffset, error) {
	b := s.b
	start, hw, _, err := b.Offsets(sub.topic, sub.index)
	var off model.QueueOffset
	switch {
	case err != nil:
	case m.MessagePublishTime != nil:
		off, _, err = b.OffsetForTime(sub.topic, sub.index, int64(m.GetMessagePublishTime()))
		if err == nil && off < 0 {
			off = hw
		}
	default:
		off = startFromID(m.GetMessageId(), start, hw)
	}
	return min(max(off, start), hw), err
}

// handleLastMessageID answers with the id of the queue's last message.
func (c *conn) handleLastMessageID(m *pulsarpb.CommandGetLastMessageId) {
	co := c.consumerOf(m.GetConsumerId())
	if co == nil {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	sub := co.sub.base()
	last, err := c.s.lastMessageID(sub)
	if err != nil {
		c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
		return
	}
	md := co.sub.position()
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_GET_LAST_MESSAGE_ID_RESPONSE.Enum(),
		GetLastMessageIdResponse: &pulsarpb.CommandGetLastMessageIdResponse{RequestId: proto.Uint64(m.GetRequestId()),
			LastMessageId:              last,
			ConsumerMarkDeletePosition: &pulsarpb.MessageIdData{LedgerId: proto.Uint64(sub.ledger), EntryId: proto.Uint64(uint64(md - 1))}}})
}

// lastMessageID finds the entry holding a queue's last readable message.
func (s *Server) lastMessageID(sub *subBase) (*pulsarpb.MessageIdData, error) {
	b := s.b
	q, _, err := b.QueueID(sub.topic, sub.index)
	if err != nil {
		return nil, err
	}
	start, hw, _, err := b.Offsets(sub.topic, sub.index)
	if err != nil {
		return nil, err
	}
	stable := b.LastStable(q, hw)
	none := &pulsarpb.MessageIdData{LedgerId: proto.Uint64(sub.ledger), EntryId: proto.Uint64(^uint64(0)), BatchIndex: proto.Int32(-1)}
	if stable <= start {
		return none, nil
	}
	last := stable - 1
	res, err := b.Read(sub.topic, sub.index, last, readOne())
	if err != nil {
		return nil, err
	}
	defer res.Release()
	for i := range res.Records {
		r := &res.Records[i]
		if last >= r.BaseOffset && last < r.BaseOffset+model.QueueOffset(r.Count) {
			return &pulsarpb.MessageIdData{LedgerId: proto.Uint64(sub.ledger), EntryId: proto.Uint64(uint64(r.BaseOffset)),
				BatchIndex: proto.Int32(int32(last - r.BaseOffset)), BatchSize: proto.Int32(int32(r.Count))}, nil
		}
	}
	return &pulsarpb.MessageIdData{LedgerId: proto.Uint64(sub.ledger), EntryId: proto.Uint64(uint64(last)), BatchIndex: proto.Int32(0)}, nil
}

// handleUnsubscribe deletes the subscription (refused while other
// consumers use it, unless forced).
func (c *conn) handleUnsubscribe(m *pulsarpb.CommandUnsubscribe) {
	co := c.consumerOf(m.GetConsumerId())
	if co == nil {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_ConsumerNotFound, "no such consumer")
		return
	}
	sub := co.sub
	if sub.consumerCount() > 1 && !m.GetForce() {
		c.errorReply(m.GetRequestId(), pulsarpb.ServerError_ConsumerBusy, "the subscription has other consumers")
		return
	}
	c.dropConsumer(co)
	c.s.subs.forget(sub)
	sub.stop()
	if sb := sub.base(); sb.durable || sb.shared {
		ctx := context.WithoutCancel(c.ctx)
		err := c.s.b.DeleteOffsets(ctx, sb.key.name, sb.topic, []int32{sb.index})
		if err == nil {
			err = c.s.forgetPop(ctx, sb.key.name, sb.key.queue)
		}
		if err != nil {
			c.errorReply(m.GetRequestId(), errorCode(err), err.Error())
			return
		}
	}
	c.success(m.GetRequestId())
}

// handleCloseConsumer detaches a consumer.
func (c *conn) handleCloseConsumer(m *pulsarpb.CommandCloseConsumer) {
	c.mu.Lock()
	co := c.consumers[m.GetConsumerId()]
	c.mu.Unlock()
	if co != nil {
		c.dropConsumer(co)
	}
	c.success(m.GetRequestId())
}

// dropConsumer removes a consumer from its connection and subscription.
func (c *conn) dropConsumer(co *consumer) {
	c.mu.Lock()
	if c.consumers[co.id] == co {
		delete(c.consumers, co.id)
	}
	c.mu.Unlock()
	co.close()
}

func (co *consumer) close() {
	co.once.Do(func() {
		if co.sub != nil {
			co.sub.remove(co)
		}
	})
}

// sendEntry sends one entry as a MESSAGE.
func (co *consumer) sendEntry(sub *subBase, e *entry, ackSet []int64, redelivered int32) {
	id := &pulsarpb.MessageIdData{LedgerId: proto.Uint64(sub.ledger), EntryId: proto.Uint64(uint64(e.base))}
	if sub.partitions > 1 {
		id.Partition = proto.Int32(sub.partition)
	}
	cmd := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_MESSAGE.Enum(), Message: &pulsarpb.CommandMessage{
		ConsumerId: proto.Uint64(co.id), MessageId: id, AckSet: ackSet}}
	if redelivered > 0 {
		cmd.Message.RedeliveryCount = proto.Uint32(uint32(redelivered))
	}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String(e.producer), SequenceId: proto.Uint64(e.sequence),
		PublishTime: proto.Uint64(uint64(max(e.publishTime, 0))), NumMessagesInBatch: proto.Int32(int32(e.count))}
	if e.uncompressed > 0 {
		md.Compression, md.UncompressedSize = e.codec.Enum(), proto.Uint32(uint32(e.uncompressed))
	}
	var bem *pulsarpb.BrokerEntryMetadata
	if co.c.entryMeta {
		bem = &pulsarpb.BrokerEntryMetadata{BrokerTimestamp: proto.Uint64(uint64(max(e.storeTime, 0))),
			Index: proto.Uint64(uint64(e.base) + uint64(e.count) - 1)}
	}
	f, err := AppendPayloadCommand(nil, cmd, bem, md, e.payload)
	if err != nil {
		co.c.log.Error("pulsar: encoding a message", "err", err)
		return
	}
	co.c.send(f)
}

// readOne reads a single record.
func readOne() broker.ReadOptions { return broker.ReadOptions{MaxRecords: 1, MaxBytes: 1} }

// closeConsumer closes a consumer from the broker's side: the client
// subscribes again (after a reset of its subscription, say).
func (c *conn) closeConsumer(co *consumer) {
	c.mu.Lock()
	if c.closed == nil {
		c.closed = map[uint64]*subBase{}
	}
	c.closed[co.id] = co.sub.base()
	c.mu.Unlock()
	c.dropConsumer(co)
	c.command(&pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CLOSE_CONSUMER.Enum(), CloseConsumer: &pulsarpb.CommandCloseConsumer{
		ConsumerId: proto.Uint64(co.id), RequestId: proto.Uint64(0)}})
}
