package kafka

// Fetch (key 1), versions 4-12.
//
// Version notes: stored record batches are returned as stored (Kafka batches
// byte for byte; messages written by other protocols converted to one-record
// batches). The first batch may begin before the fetch offset; clients skip
// the records before it, as with Kafka. Long polling honours MaxWaitMillis and
// MinBytes without polling: the request parks until an append makes data
// visible. Partition and response byte limits apply, but the first batch is
// always returned whole (KIP-74). read_committed sees the last stable offset,
// which equals the high watermark while no transactions exist.
//
// Not implemented: incremental fetch sessions (KIP-227): the broker answers
// session id 0, which tells clients to send full requests; preferred read
// replicas; topic ids (v13+).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleFetch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.FetchRequest)
	s := rc.srv()
	deadline := time.Now().Add(time.Duration(req.MaxWaitMillis) * time.Millisecond)
	for {
		resp, total, watches := s.fetchOnce(req)
		if total >= int(req.MinBytes) || req.MaxWaitMillis <= 0 || len(watches) == 0 || !time.Now().Before(deadline) {
			return reply{resp: resp}
		}
		ctx, cancel := context.WithDeadline(rc.ctx(), deadline)
		err := s.broker.Wait(ctx, watches)
		cancel()
		if err != nil {
			if rc.ctx().Err() != nil {
				return reply{resp: resp}
			}
			// Timed out (or a topic changed): answer with what there is now.
			resp, _, _ = s.fetchOnce(req)
			return reply{resp: resp}
		}
	}
}

// fetchOnce reads every requested partition once. It returns the response,
// the bytes it holds and the positions to wait on for more.
func (s *Server) fetchOnce(req *kmsg.FetchRequest) (*kmsg.FetchResponse, int, []broker.Watch) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := int(req.MaxBytes)
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	total := 0
	var watches []broker.Watch
	for _, rt := range req.Topics {
		tr := kmsg.FetchResponseTopic{Topic: rt.Topic, TopicID: rt.TopicID}
		name, nerr := topicName(rt.Topic)
		var t *broker.Topic
		if nerr == nil {
			t, nerr = s.broker.Topic(name)
		}
		for _, rp := range rt.Partitions {
			// Records are never null: librdkafka 2.0 rejects a null record set.
			pr := kmsg.FetchResponseTopicPartition{Partition: rp.Partition, HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1,
				PreferredReadReplica: -1, RecordBatches: []byte{}}
			if nerr != nil {
				pr.ErrorCode = errorCode(nerr)
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			budget := min(int(rp.PartitionMaxBytes), maxBytes-total)
			if budget <= 0 && total > 0 {
				budget = 0
			}
			n, err := s.fetchPartition(t, rp.Partition, model.QueueOffset(rp.FetchOffset), budget, total == 0, &pr)
			if err != nil {
				pr.ErrorCode = errorCode(err)
			} else if n == 0 && pr.HighWatermark >= 0 && rp.FetchOffset >= pr.HighWatermark {
				watches = append(watches, broker.Watch{Topic: t.Name, Index: rp.Partition, Offset: model.QueueOffset(rp.FetchOffset)})
			}
			total += n
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, total, watches
}

// fetchPartition fills pr with batches from offset, at most budget bytes
// (but at least one batch when first is set).
func (s *Server) fetchPartition(t *broker.Topic, partition int32, offset model.QueueOffset, budget int, first bool, pr *kmsg.FetchResponseTopicPartition) (int, error) {
	if partition < 0 || int(partition) >= len(t.Queues) {
		return 0, model.ErrUnknownQueue
	}
	start, hw, _, err := s.broker.Offsets(t.Name, partition)
	if err != nil {
		return 0, err
	}
	pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = int64(hw), int64(hw), int64(start)
	if offset < start || offset > hw {
		return 0, model.ErrOffsetOutOfRange
	}
	if offset == hw || (budget <= 0 && !first) {
		return 0, nil
	}
	readMax := budget
	if first && readMax <= 0 {
		readMax = 1
	}
	res, err := s.broker.Read(t.Name, partition, offset, broker.ReadOptions{MaxBytes: readMax})
	if err != nil {
		return 0, err
	}
	defer res.Release()
	var out []byte
	for i := range res.Records {
		if out, err = appendStoredAsBatches(out, &res.Records[i]); err != nil {
			return 0, err
		}
	}
	if out != nil {
		pr.RecordBatches = out
	}
	return len(out), nil
}

// fetchSessions is the placeholder for KIP-227 session state.
type fetchSessions struct{}

func newFetchSessions() *fetchSessions { return &fetchSessions{} }
