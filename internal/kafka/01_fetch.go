package kafka

// Fetch (key 1), versions 4-16.
//
// Version notes: stored record batches are returned as stored (Kafka batches
// byte for byte; messages written by other protocols converted to one-record
// batches). The first batch may begin before the fetch offset; clients skip
// the records before it, as with Kafka. Long polling honours MaxWaitMillis and
// MinBytes without polling: the request parks until MinBytes are visible
// across its partitions (each counted up to its partition limit, from the
// index) or MaxWait passes (at most a minute), or the client disconnects;
// appends wake it to count again. Partition and response byte limits apply, but the first batch is
// always returned whole (KIP-74). Every answer carries the last stable
// offset (below the oldest open transaction; the high watermark when none
// is open). read_committed fetches stop there and get the aborted
// transactions overlapping what they return, so the client drops aborted
// records even when they share a response with committed ones; their long
// polls wait for data below the last stable offset (a transaction's end
// wakes them).
//
// Incremental fetch sessions (KIP-227, v7+) are kept broker-wide (see
// fetch_sessions.go). v13+ names topics by id. v9+ CurrentLeaderEpoch is
// checked per partition (KIP-320: older FENCED_LEADER_EPOCH, newer
// UNKNOWN_LEADER_EPOCH); stored batches carry the epoch they were written in.
//
// A partition this node does not lead is NOT_LEADER_OR_FOLLOWER with
// KIP-951's CurrentLeader from the broker's router — unless the fetch comes
// from Kafka's debugging replica id (-2) and this cluster member holds a
// copy of the partition's group: then it is read from that copy, up to the
// commit index the member knows (replica_reads.go).
//
// Not implemented: preferred read replicas; KIP-951 NodeEndpoints (a
// cluster adds the other nodes' addresses).

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/quota"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

func handleFetch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.FetchRequest)
	s := rc.srv()
	start := time.Now()
	if req.Version >= 13 {
		s.resolveTopicIDs(rc.conn.home, req)
	}
	// KIP-227: work out which partitions this request covers.
	var sess *fetchSession
	incremental := false
	switch {
	case req.Version < 7 || req.SessionEpoch == -1:
		if req.Version >= 7 && req.SessionID != 0 {
			s.sessions.remove(req.SessionID)
		}
	case req.SessionEpoch == 0:
		if req.SessionID != 0 {
			s.sessions.remove(req.SessionID)
		}
		sess = s.sessions.create()
		sess.mu.Lock()
		sess.update(req, func(id [16]byte) string { return s.topicNameForID(rc.conn.home, id) })
		sess.mu.Unlock()
	default:
		var code int16
		sess, code = s.sessions.lookup(req.SessionID, req.SessionEpoch)
		if code != 0 {
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			resp.ErrorCode = code
			return reply{resp: resp}
		}
		incremental = true
		sess.mu.Lock()
		if sess.epoch != req.SessionEpoch { // raced with another request
			sess.mu.Unlock()
			resp := req.ResponseKind().(*kmsg.FetchResponse)
			resp.ErrorCode = kerr.InvalidFetchSessionEpoch.Code
			return reply{resp: resp}
		}
		sess.update(req, func(id [16]byte) string { return s.topicNameForID(rc.conn.home, id) })
		sess.mu.Unlock()
	}
	work := req
	if sess != nil {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		work = sess.asRequest(req)
	}
	finish := func(resp *kmsg.FetchResponse) reply {
		if s.opts.Tracer.Enabled() {
			traceFetch(rc, resp, start)
		}
		throttle := s.chargeFetch(rc, resp)
		resp.ThrottleMillis = int32(throttle / time.Millisecond)
		if sess != nil {
			sess.filter(resp, incremental)
			resp.SessionID = sess.id
			sess.epoch = req.SessionEpoch + 1 // epochs wrap past MaxInt32 to 1
			if sess.epoch <= 0 {
				sess.epoch = 1
			}
		}
		return reply{resp: resp, throttle: throttle}
	}
	resp, total, watches := s.fetchOnce(rc, work)
	if total >= int(req.MinBytes) || req.MaxWaitMillis <= 0 || len(watches) == 0 {
		return finish(resp)
	}
	// Park until MinBytes are there across the partitions or MaxWait passes;
	// appends wake the wait, which counts bytes from the index, and the
	// records are read once, at the end.
	ctx, cancel := context.WithTimeout(rc.waitCtx(), min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait))
	waitBytes(ctx, watches, int(req.MinBytes))
	cancel()
	if rc.ctx().Err() == nil {
		resp, _, _ = s.fetchOnce(rc, work)
	}
	return finish(resp)
}

// maxFetchWait bounds how long a fetch parks whatever MaxWait it asks for
// (an early answer with less than MinBytes is always valid; clients ask
// for half a second to a few seconds).
const maxFetchWait = time.Minute

// resolveTopicIDs fills in topic names for v13+ requests, which name topics
// by id.
func (s *Server) resolveTopicIDs(h home, req *kmsg.FetchRequest) {
	for i := range req.Topics {
		if req.Topics[i].Topic == "" {
			req.Topics[i].Topic = s.topicNameForID(h, req.Topics[i].TopicID)
		}
	}
}

// topicNameForID maps a topic id to its Kafka name ("" if unknown).
func (s *Server) topicNameForID(h home, id [16]byte) string {
	t, err := s.cat().TopicByID(id)
	if err != nil {
		return ""
	}
	return kafkaName(h, t)
}

// fetchOnce reads every requested partition once. It returns the response,
// the bytes it holds and the positions to wait on for more.
func (s *Server) fetchOnce(rc *reqCtx, req *kmsg.FetchRequest) (*kmsg.FetchResponse, int, []groupWatch) {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	maxBytes := int(req.MaxBytes)
	if req.Version < 3 || maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	total := 0
	var watches []groupWatch
	replica := req.ReplicaID
	if req.Version >= 15 {
		replica = req.ReplicaState.ID
	}
	s.prefetchCold(rc, req)
	for _, rt := range req.Topics {
		tr := kmsg.NewFetchResponseTopic()
		tr.Topic = rt.Topic
		tr.TopicID = rt.TopicID
		t, nerr := rc.lookupTopic(rt.Topic)
		if req.Version >= 13 && rt.Topic == "" {
			nerr = errUnknownTopicID
		} else if !rc.allowedTopic(rt.Topic, security.OpRead) {
			t, nerr = nil, errTopicAuthorization
		}
		if t != nil {
			tr.TopicID = topicID(t)
		}
		for _, rp := range rt.Partitions {
			// Records are never null: librdkafka 2.0 rejects a null record set.
			pr := kmsg.NewFetchResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.HighWatermark = -1
			pr.LastStableOffset = -1
			pr.LogStartOffset = -1
			pr.PreferredReadReplica = -1
			pr.RecordBatches = []byte{}
			if nerr != nil {
				pr.ErrorCode = errorCode(nerr)
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			budget := min(int(rp.PartitionMaxBytes), maxBytes-total)
			if budget <= 0 && total > 0 {
				budget = 0
			}
			committed := req.IsolationLevel == 1
			n := 0
			pp, err := s.partition(t, rp.Partition)
			if cp, ok := s.logCopy(t, rp.Partition, replica, err); ok {
				n, err = fetchCopy(cp, model.QueueOffset(rp.FetchOffset), budget, total == 0, &pr)
				if err != nil {
					pr.ErrorCode = errorCode(err)
				}
				total += n
				tr.Partitions = append(tr.Partitions, pr)
				continue
			}
			if err == nil {
				err = checkPartitionEpoch(pp, rp.CurrentLeaderEpoch)
			}
			if err == nil {
				n, err = s.fetchPartition(rc, pp, model.QueueOffset(rp.FetchOffset), budget, total == 0, committed, &pr)
			}
			if err != nil {
				pr.ErrorCode = errorCode(err)
				if leader, epoch, ok := currentLeader(err); ok { // KIP-951
					pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
				}
			} else {
				watches = append(watches, groupWatch{pp.be, broker.Watch{Topic: t.Name, Index: pp.index,
					Offset: model.QueueOffset(rp.FetchOffset), MaxBytes: int(rp.PartitionMaxBytes), Stable: committed}})
			}
			total += n
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return resp, total, watches
}

// prefetchCold starts the cold reads of the partitions whose fetch offset
// is only in the object store, all at once, before fetchOnce reads the
// partitions one after another (nothing to do without tiered storage).
func (s *Server) prefetchCold(rc *reqCtx, req *kmsg.FetchRequest) {
	for _, rt := range req.Topics {
		t, err := rc.lookupTopic(rt.Topic)
		if err != nil || !rc.allowedTopic(rt.Topic, security.OpRead) {
			continue
		}
		for _, rp := range rt.Partitions {
			if pp, err := s.partition(t, rp.Partition); err == nil && pp.be.broker.Tiered() {
				pp.be.broker.Prefetch(pp.queue, model.QueueOffset(rp.FetchOffset))
			}
		}
	}
}

// fetchPartition fills pr with batches from offset, at most budget bytes
// (but at least one batch when first is set); committed stops at the last
// stable offset and lists the aborted transactions.
func (s *Server) fetchPartition(rc *reqCtx, pp part, offset model.QueueOffset, budget int, first, committed bool, pr *kmsg.FetchResponseTopicPartition) (int, error) {
	b, t, partition, queue := pp.be.broker, pp.topic, pp.index, pp.queue
	start, hw, _, err := b.Offsets(t.Name, partition)
	if err != nil {
		return 0, err
	}
	lso := pp.be.txnIndex.LastStable(queue, hw)
	pr.HighWatermark, pr.LastStableOffset, pr.LogStartOffset = int64(hw), int64(lso), int64(start)
	if committed {
		pr.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
	}
	if offset < start {
		// A moved partition's history is in the groups it was in.
		if n, ok, err := s.fetchHistory(rc.ctx(), pp, offset, budget, first, committed, pr); ok {
			return n, err
		}
	}
	if offset < start || offset > hw {
		return 0, model.ErrOffsetOutOfRange
	}
	end := hw
	if committed {
		end = lso
	}
	if offset >= end || (budget <= 0 && !first) {
		return 0, nil
	}
	readMax := budget
	if first && readMax <= 0 {
		readMax = 1
	}
	res, err := b.Read(t.Name, partition, offset, broker.ReadOptions{MaxBytes: readMax})
	if err != nil {
		return 0, err
	}
	defer res.Release()
	out, upTo, err := encodeStored(res.Records, offset, end)
	if err != nil {
		return 0, err
	}
	if out != nil {
		pr.RecordBatches = out
		if b.Traced(t, "") {
			traceFetched(rc, pp, offset, end, res.Records)
		}
	}
	if committed && upTo > offset {
		for _, a := range pp.be.txnIndex.Aborted(queue, offset, upTo) {
			aborted := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			aborted.ProducerID = a.ProducerID
			aborted.FirstOffset = int64(a.FirstOffset)
			pr.AbortedTransactions = append(pr.AbortedTransactions, aborted)
		}
	}
	return len(out), nil
}

// encodeStored encodes stored records from offset as Kafka batches, up to
// (not including) the record starting at end; upTo is the offset after the
// last one encoded.
func encodeStored(recs []broker.StoredRecord, offset, end model.QueueOffset) (out []byte, upTo model.QueueOffset, err error) {
	upTo = offset
	// Sized once: a fetch's records are most of what the broker allocates
	// while consumers catch up, and growing the buffer by doubling
	// allocated about four times what it returned.
	size := 0
	for i := range recs {
		if recs[i].BaseOffset >= end {
			break
		}
		size += len(recs[i].Payload)
		if recs[i].Format == model.FormatMessage {
			size += messageBatchOverhead
		}
	}
	if size > 0 {
		out = make([]byte, 0, size)
	}
	for i := range recs {
		r := &recs[i]
		if r.BaseOffset >= end {
			break // past the last stable offset
		}
		if out, err = appendStoredAsBatches(out, r); err != nil {
			return nil, offset, err
		}
		upTo = r.BaseOffset + model.QueueOffset(r.Count)
	}
	return out, upTo, nil
}

// traceFetched records a delivered event for each record of a traced topic
// a fetch returns from offset (before end): Kafka fetches name no group, so
// the event names the client; transaction markers and aborted batches are
// not deliveries.
func traceFetched(rc *reqCtx, pp part, offset, end model.QueueOffset, recs []broker.StoredRecord) {
	ev := broker.TraceEvent{Kind: broker.TraceDelivered, Protocol: "kafka", Client: rc.hdr.ClientID, Attempt: 1, Detail: "fetch"}
	b, t, partition, queue := pp.be.broker, pp.topic, pp.index, pp.queue
	for i := range recs {
		r := &recs[i]
		if r.BaseOffset >= end {
			return
		}
		switch r.Format {
		case model.FormatMessage:
			if m, err := broker.DecodeMessage(r.Payload); err == nil && r.BaseOffset >= offset {
				b.TraceMessage(t, partition, r.BaseOffset, &m, ev)
			}
		case model.FormatKafkaBatchV2:
			if b.HiddenKafkaBatch(queue, r) {
				continue
			}
			for o := max(r.BaseOffset, offset); o < r.BaseOffset+model.QueueOffset(r.Count) && o < end; o++ {
				b.TraceRecord(t, partition, o, ev)
			}
		}
	}
}

// groupWatch is a fetched partition to wait on, by the backend serving it.
type groupWatch struct {
	be *backend
	w  broker.Watch // by the backend's own view of the topic
}

// waitBytes parks until minBytes are visible across the watched
// partitions of one group, or ctx ends. When a fetch spans the groups of
// several backends each waits on its own, and the first to have enough
// ends the wait (clients ask for one byte, so that is any data).
func waitBytes(ctx context.Context, watches []groupWatch, minBytes int) {
	byBackend := map[*backend][]broker.Watch{}
	for _, gw := range watches {
		byBackend[gw.be] = append(byBackend[gw.be], gw.w)
	}
	if len(byBackend) == 1 {
		for be, ws := range byBackend {
			_ = be.broker.WaitBytes(ctx, ws, minBytes)
		}
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{}, len(byBackend))
	for be, ws := range byBackend {
		go func() {
			_ = be.broker.WaitBytes(ctx, ws, minBytes)
			done <- struct{}{}
		}()
	}
	<-done
	cancel()
	for range len(byBackend) - 1 {
		<-done
	}
}

// chargeFetch charges the bytes a fetch returns to each topic's fetch
// quota and returns the throttle time.
func (s *Server) chargeFetch(rc *reqCtx, resp *kmsg.FetchResponse) time.Duration {
	if !s.opts.Quotas.Active() {
		return 0
	}
	var throttle time.Duration
	for _, tr := range resp.Topics {
		n := 0
		for _, p := range tr.Partitions {
			n += len(p.RecordBatches)
		}
		if n == 0 {
			continue
		}
		t, err := rc.lookupTopic(tr.Topic)
		if tr.Topic == "" {
			t, err = s.cat().TopicByID(tr.TopicID)
		}
		if err == nil {
			throttle = max(throttle, s.opts.Quotas.Charge(t.Name, rc.quotaUser(), rc.hdr.ClientID, quota.Fetch, n))
		}
	}
	return throttle
}

// traceFetch records a span for a fetch that returned records.
func traceFetch(rc *reqCtx, resp *kmsg.FetchResponse, start time.Time) {
	bytes, parts := 0, 0
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			if n := len(resp.Topics[i].Partitions[j].RecordBatches); n > 0 {
				bytes += n
				parts++
			}
		}
	}
	if bytes == 0 {
		return
	}
	rc.srv().opts.Tracer.Start(rc.ctx(), "fetch", "", trace.SpanKindServer, start,
		attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "receive"),
		attribute.Int("rosetta.fetch.partitions", parts), attribute.Int("rosetta.fetch.bytes", bytes),
		attribute.String("messaging.client.id", rc.hdr.ClientID)).End()
}
