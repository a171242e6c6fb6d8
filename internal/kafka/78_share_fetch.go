package kafka

// ShareFetch (key 78), versions 1-2: a share group member acquires records
// of the partitions in its share session and acknowledges those it holds
// (KIP-932).
//
// Version notes: records are acquired for the group's
// share.record.lock.duration.ms (AcquisitionLockTimeoutMillis) on the POP
// engine of the partition's group: first those released or whose lock ended
// (lowest offsets first; one delivered share.delivery.count.limit times is
// archived instead), then new ones from the group's place in the partition,
// which starts where share.auto.offset.reset says (latest, earliest,
// by_duration). MaxRecords counts over the request's partitions (500 when
// unset) and is never exceeded, in either ShareAcquireMode (v2): a stored
// batch crossing it is acquired in part, so a group's members share large
// batches (Kafka's batch-optimized mode may acquire whole batches past
// MaxRecords). MaxBytes bounds the new records read (at least one batch).
// The response carries the stored batches holding the acquired offsets,
// whole, and the acquired ranges with their delivery counts; a partition
// with nothing acquired has empty, never null, Records. Transaction markers
// are never acquired; share.isolation.level=read_committed also skips
// aborted batches and stops at the last stable offset.
//
// Sessions: epoch 0 opens one (acknowledgements then are INVALID_REQUEST),
// each request carries the next epoch (SHARE_SESSION_NOT_FOUND,
// INVALID_SHARE_SESSION_EPOCH otherwise), -1 closes it after its
// acknowledgements and releases what the member still holds; a closed
// connection does the same. A request names the partitions joining the
// session and forgets those leaving it (their records are released); every
// session partition is fetched. Acknowledgements are settled per partition,
// all or none: an offset the member does not hold is INVALID_RECORD_STATE
// in that partition's AcknowledgeErrorCode. v2's IsRenewAck requests renew
// (type 4; INVALID_REQUEST when the group's share.renew.acknowledge.enable
// is false) and acquire nothing. With nothing acquired the request waits up
// to MaxWaitMillis for new records, looking again for released ones every
// quarter second.
//
// Not implemented: NodeEndpoints; share fetches through protocol-only
// nodes.

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
)

// shareRecheck is how often a waiting share fetch looks for records
// released or whose lock ended.
const shareRecheck = 250 * time.Millisecond

// defaultShareMaxRecords is MaxRecords when a request sets none (Kafka's
// max.poll.records default).
const defaultShareMaxRecords = 500

func handleShareFetch(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ShareFetchRequest)
	resp := req.ResponseKind().(*kmsg.ShareFetchResponse)
	s := rc.srv()
	fail := func(code int16, msg string) reply {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return reply{resp: resp}
	}
	group, member, code, msg := rc.shareMember(req.GroupID, req.MemberID)
	if code != 0 {
		return fail(code, msg)
	}
	hasAcks := false
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			hasAcks = hasAcks || len(rp.AcknowledgementBatches) > 0
		}
	}
	if req.ShareSessionEpoch == 0 && hasAcks {
		return fail(kerr.InvalidRequest.Code, "acknowledgements in a request opening a share session")
	}
	renew := req.Version >= 2 && req.IsRenewAck
	sess, old, closing, serr := s.shares.open(rc.conn, group, member, req.ShareSessionEpoch)
	if serr != nil {
		return fail(serr.code, "")
	}
	defer sess.mu.Unlock()
	if old != nil {
		old.mu.Lock()
		s.releaseShare(old, old.order)
		old.mu.Unlock()
	}
	set := shareSettingsOf(s.cat(), group)
	resp.AcquisitionLockTimeoutMillis = int32(set.lock / time.Millisecond)
	ans := newShareFetchAnswer(resp)
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			p := sharePart{rt.TopicID, rp.Partition}
			ans.part(p)
			if !closing {
				sess.add(p)
			}
		}
	}
	var forgotten []sharePart
	for _, ft := range req.ForgottenTopicsData {
		for _, p := range ft.Partitions {
			forgotten = append(forgotten, sharePart{ft.TopicID, p})
		}
	}
	s.releaseShare(sess, sess.forget(forgotten))
	// Acknowledgements first: what they release can be acquired below.
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			if len(rp.AcknowledgementBatches) == 0 {
				continue
			}
			p := sharePart{rt.TopicID, rp.Partition}
			bs := rp.AcknowledgementBatches
			batches, err := ackBatches(len(bs), func(i int) (int64, int64, []int8) {
				return bs[i].FirstOffset, bs[i].LastOffset, bs[i].AcknowledgeTypes
			}, renew && set.renew)
			if err == nil {
				err = rc.settleShare(sess, p, batches, set.lock)
			}
			if err != nil {
				pr := ans.part(p)
				pr.AcknowledgeErrorCode, pr.AcknowledgeErrorMessage = errorCode(err), errorMessage(err)
				if leader, epoch, ok := currentLeader(err); ok {
					pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
				}
			}
		}
	}
	if closing {
		s.releaseShare(sess, sess.order)
		return reply{resp: resp}
	}
	if renew || len(sess.order) == 0 {
		return reply{resp: resp}
	}
	want := int(req.MaxRecords)
	if want <= 0 {
		want = defaultShareMaxRecords
	}
	maxBytes := int(req.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 30
	}
	wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait)
	deadline := time.Now().Add(wait)
	for {
		got, watches := rc.shareFetchOnce(sess, set, ans, want, maxBytes)
		left := time.Until(deadline)
		if got > 0 || left <= 0 || rc.waitCtx().Err() != nil {
			break
		}
		ctx, cancel := context.WithTimeout(rc.waitCtx(), min(left, shareRecheck))
		if len(watches) > 0 {
			waitBytes(ctx, watches, 1)
		} else {
			<-ctx.Done()
		}
		cancel()
	}
	return reply{resp: resp}
}

// shareFetchOnce acquires records of the session's partitions, starting
// at a different partition each time so none starves; it returns how many
// it acquired and where to wait for more.
func (rc *reqCtx) shareFetchOnce(sess *shareSession, set shareSettings, ans *shareFetchAnswer, want, maxBytes int) (int, []groupWatch) {
	got, total := 0, 0
	var watches []groupWatch
	n := len(sess.order)
	first := int(sess.epoch) % n
	for i := range n {
		p := sess.order[(first+i)%n]
		if got >= want {
			break
		}
		pp, err := rc.resolveShare(p)
		if err != nil {
			pr := ans.part(p)
			pr.ErrorCode, pr.ErrorMessage = errorCode(err), errorMessage(err)
			if leader, epoch, ok := currentLeader(err); ok {
				pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
			}
			continue
		}
		budget := maxBytes - total
		if budget <= 0 && total > 0 {
			break
		}
		a, err := rc.acquireShare(sess, pp, set, want-got, budget)
		if err != nil {
			pr := ans.part(p)
			pr.ErrorCode, pr.ErrorMessage = errorCode(err), errorMessage(err)
			rc.conn.log.Debug("share fetch failed", "group", sess.key.group, "queue", pp.queue, "err", err)
		}
		if a.waitAt >= 0 {
			watches = append(watches, groupWatch{pp.be, broker.Watch{Topic: pp.topic.Name, Index: pp.index, Offset: a.waitAt, Stable: set.committed}})
		}
		if len(a.runs) == 0 {
			continue
		}
		pr := ans.part(p)
		pr.Records = append(pr.Records, a.records...)
		for _, r := range a.runs {
			ar := kmsg.NewShareFetchResponseTopicPartitionAcquiredRecord()
			ar.FirstOffset, ar.LastOffset, ar.DeliveryCount = int64(r.First), int64(r.Last), int16(min(r.DeliveryCount, 1<<15-1))
			pr.AcquiredRecords = append(pr.AcquiredRecords, ar)
			got += int(r.Last - r.First + 1)
		}
		total += len(a.records)
	}
	return got, watches
}

// shareFetchAnswer builds a ShareFetch response, one entry per partition.
type shareFetchAnswer struct {
	resp   *kmsg.ShareFetchResponse
	topics map[[16]byte]int
	parts  map[sharePart][2]int
}

func newShareFetchAnswer(resp *kmsg.ShareFetchResponse) *shareFetchAnswer {
	return &shareFetchAnswer{resp: resp, topics: map[[16]byte]int{}, parts: map[sharePart][2]int{}}
}

// part returns a partition's entry, adding it (no error, empty records).
func (a *shareFetchAnswer) part(p sharePart) *kmsg.ShareFetchResponseTopicPartition {
	if at, ok := a.parts[p]; ok {
		return &a.resp.Topics[at[0]].Partitions[at[1]]
	}
	ti, ok := a.topics[p.topic]
	if !ok {
		ti = len(a.resp.Topics)
		a.topics[p.topic] = ti
		rt := kmsg.NewShareFetchResponseTopic()
		rt.TopicID = p.topic
		a.resp.Topics = append(a.resp.Topics, rt)
	}
	rp := kmsg.NewShareFetchResponseTopicPartition()
	rp.Partition = p.partition
	rp.Records = []byte{} // never null: librdkafka drops a response with a null record set
	rp.AcquiredRecords = []kmsg.ShareFetchResponseTopicPartitionAcquiredRecord{}
	rp.CurrentLeader.LeaderID, rp.CurrentLeader.LeaderEpoch = -1, -1
	t := &a.resp.Topics[ti]
	a.parts[p] = [2]int{ti, len(t.Partitions)}
	t.Partitions = append(t.Partitions, rp)
	return &t.Partitions[len(t.Partitions)-1]
}
