package kafka

// Produce (key 0), versions 0-11 advertised.
//
// Version notes: min version 0 is advertised because librdkafka < 2.11.1
// turns compression off otherwise; v0-2 bodies (magic 0/1 message sets) get
// UNSUPPORTED_FOR_MESSAGE_FORMAT. The broker's produce rules
// (internal/broker/produce: validation, idempotence, transactions, timers,
// LogAppendTime, key index, compacted topics) decide what is stored; this
// handler authorizes, charges quotas and maps the outcome: acks=0 sends no
// response; acks=1 answers once written; acks=all waits for the durability
// policy (fsync with group commit in sync mode). In a cluster, acks=all
// waits for the commit (a majority has the records), and so does acks=1
// unless cluster.leader_ack is set. A duplicate gets its
// original offset, a gap OUT_OF_ORDER_SEQUENCE_NUMBER, a record without a
// key on a compacted topic INVALID_RECORD naming it (KIP-467; other invalid
// batches are named as a whole, index 0), a transactional batch outside
// its producer's open transaction INVALID_TXN_STATE (INVALID_PRODUCER_EPOCH
// for a fenced epoch), a control batch from a client INVALID_RECORD.
//
// A partition this node does not lead is NOT_LEADER_OR_FOLLOWER with KIP-951's
// CurrentLeader; otherwise CurrentLeader keeps its defaults (-1), so a
// client never reads a leader change into a successful answer.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleProduce(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ProduceRequest)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	s := rc.srv()
	start := time.Now()
	var written []produce.Result
	var writers []*produce.Appender // the appender of each written result
	var throttle time.Duration
	txnDenied := req.TransactionID != nil && !rc.allowedTxnID(*req.TransactionID, security.OpWrite)
	for _, rt := range req.Topics {
		tr := kmsg.NewProduceResponseTopic()
		tr.Topic = rt.Topic
		t, nerr := rc.lookupTopic(rt.Topic)
		switch {
		case txnDenied:
			nerr = errTxnIDAuthorization
		case !rc.allowedTopic(rt.Topic, security.OpWrite):
			nerr = errTopicAuthorization
		case nerr == nil && s.opts.Quotas.Active():
			nerr = s.opts.Quotas.CheckStorage(t.Name)
		}
		for _, rp := range rt.Partitions {
			pr := kmsg.NewProduceResponseTopicPartition()
			pr.Partition, pr.BaseOffset, pr.LogAppendTime, pr.LogStartOffset = rp.Partition, -1, -1, -1
			err := nerr
			var pp part
			if err == nil {
				pp, err = s.partition(t, rp.Partition)
			}
			if err == nil && req.Acks == -1 {
				err = s.checkInSync(pp)
			}
			if err == nil {
				var res produce.Result
				if res, err = pp.be.produce.Append(rc.ctx(), pp.topic, pp.index, rp.Records, deref(req.TransactionID)); err == nil {
					pr.BaseOffset, pr.LogAppendTime = int64(res.BaseOffset), res.LogAppendTime
					written = append(written, res)
					writers = append(writers, pp.be.produce)
					if s.opts.Tracer.Enabled() {
						s.opts.Tracer.Start(rc.ctx(), "produce "+rt.Topic, res.TraceParent, trace.SpanKindServer, start,
							attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
							attribute.String("messaging.destination.name", rt.Topic),
							attribute.Int("messaging.destination.partition.id", int(rp.Partition)),
							attribute.Int64("messaging.kafka.offset", int64(res.BaseOffset)),
							attribute.String("messaging.client.id", rc.hdr.ClientID)).End()
					}
					if s.opts.Quotas.Active() {
						throttle = max(throttle, s.opts.Quotas.Charge(t.Name, rc.quotaUser(), rc.hdr.ClientID, quota.Produce, len(rp.Records)))
					}
					if pp.be.broker.Traced(t, "") {
						traceProduced(rc, pp, req.TransactionID, res.Stored)
					}
				}
			}
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = errorCode(err), errorMessage(err)
				if leader, epoch, ok := currentLeader(err); ok { // KIP-951
					pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
				}
				var re *produce.RecordErrors
				if errors.As(err, &re) {
					// KIP-467: name each offending record by its index in the batch.
					for _, i := range re.Indexes {
						er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
						er.RelativeOffset, er.ErrorMessage = i, pr.ErrorMessage
						pr.ErrorRecords = append(pr.ErrorRecords, er)
					}
				} else if pr.ErrorCode == kerr.InvalidRecord.Code {
					// KIP-467: the batch as a whole is invalid.
					er := kmsg.NewProduceResponseTopicPartitionErrorRecord()
					er.ErrorMessage = pr.ErrorMessage
					pr.ErrorRecords = []kmsg.ProduceResponseTopicPartitionErrorRecord{er}
				}
				switch {
				case errors.Is(err, producers.ErrOutOfOrderSequence), errors.Is(err, producers.ErrInvalidEpoch):
					// The client resets its sequences on these: worth a
					// line whenever they happen.
					rc.conn.log.Info("produce refused", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				case nerr == nil:
					rc.conn.log.Debug("produce refused", "topic", rt.Topic, "partition", rp.Partition, "err", err)
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	resp.ThrottleMillis = int32(throttle / time.Millisecond)
	r := reply{resp: resp, none: req.Acks == 0, throttle: throttle}
	// In a cluster acks=1 waits for the commit too, unless leader
	// acknowledgement is configured: a leader's own write is lost with it.
	waitCommit := req.Acks == 1 && s.opts.Cluster != nil && !s.opts.LeaderAck
	if (req.Acks == -1 || waitCommit) && len(written) > 0 {
		timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
		r.await = func() {
			ctx, cancel := context.WithTimeout(rc.ctx(), max(timeout, time.Second))
			defer cancel()
			if err := waitDurable(ctx, written, writers); err != nil {
				code := errorCode(err)
				for i := range resp.Topics {
					for j := range resp.Topics[i].Partitions {
						if resp.Topics[i].Partitions[j].ErrorCode == 0 {
							resp.Topics[i].Partitions[j].ErrorCode = code
						}
					}
				}
			}
		}
	}
	return r
}

// checkInSync refuses an acks=all produce to a partition whose group holds
// fewer voters in sync than the topic's min.insync.replicas (else the
// broker-wide default; 1 unless set), as Kafka does before appending: with
// fewer copies than the producer asked for, nothing is written.
func (s *Server) checkInSync(pp part) error {
	v, ok := pp.topic.Config.Extra["min.insync.replicas"]
	if !ok {
		if v, _, ok = pp.be.broker.DynamicBrokerConfig(model.NodeID(s.opts.NodeID), "min.insync.replicas"); !ok {
			return nil
		}
	}
	need, err := strconv.Atoi(v)
	if err != nil || need <= 1 {
		return nil
	}
	have, known := 1, true
	if s.opts.InSync != nil {
		have, known = s.opts.InSync(pp.be.group)
	}
	if !known || have >= need {
		return nil
	}
	return &kafkaCodeError{code: kerr.NotEnoughReplicas.Code,
		msg: fmt.Sprintf("%d replicas in sync, min.insync.replicas is %d", have, need)}
}

// kafkaCodeError carries a Kafka code decided by a handler.
type kafkaCodeError struct {
	code int16
	msg  string
}

func (e *kafkaCodeError) Error() string { return e.msg }

// traceProduced records a produced event per stored record of a traced
// topic (found by place: Kafka records have no message id).
func traceProduced(rc *reqCtx, pp part, txnID *string, stored []produce.Stored) {
	ev := broker.TraceEvent{Kind: broker.TraceProduced, Protocol: "kafka", Client: rc.hdr.ClientID}
	if txnID != nil {
		ev.Group, ev.Detail = *txnID, "transactional"
	}
	for _, st := range stored {
		for i := range st.Count {
			pp.be.broker.TraceRecord(pp.topic, pp.index, st.Base+model.QueueOffset(i), ev)
		}
	}
}

// waitDurable waits until every written result is durable (committed, in
// a cluster), each by the appender of its group.
func waitDurable(ctx context.Context, written []produce.Result, writers []*produce.Appender) error {
	if len(writers) > 0 && allSame(writers) {
		return writers[0].WaitDurable(ctx, written...)
	}
	for i, w := range writers {
		if err := w.WaitDurable(ctx, written[i]); err != nil {
			return err
		}
	}
	return nil
}

func allSame[T comparable](xs []T) bool {
	for _, x := range xs[1:] {
		if x != xs[0] {
			return false
		}
	}
	return true
}
