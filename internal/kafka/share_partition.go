package kafka

// A share session's work on one partition: acquiring records for the
// member from the POP engine of the partition's group (share.go there) and
// encoding the stored batches that hold them, and settling the member's
// acknowledgements.

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// resolveShare finds a session partition for a request: the topic by id,
// the member's right to read it, and the partition's backend here.
func (rc *reqCtx) resolveShare(p sharePart) (part, error) {
	s := rc.srv()
	t, err := s.cat().TopicByID(p.topic)
	if err != nil {
		return part{}, errUnknownTopicID
	}
	if !rc.allowedTopic(kafkaName(rc.conn.home, t), security.OpRead) {
		return part{}, errTopicAuthorization
	}
	pp, err := s.partition(t, p.partition)
	if err != nil {
		return part{}, err
	}
	if pp.be.pop == nil {
		return part{}, &kafkaCodeError{code: kerr.UnsupportedVersion.Code, msg: "share groups are not served here"}
	}
	return pp, nil
}

// settleShare applies a member's acknowledgements of one partition.
func (rc *reqCtx) settleShare(sess *shareSession, p sharePart, batches []pop.AckBatch, lock time.Duration) error {
	pp, err := rc.resolveShare(p)
	if err != nil {
		return err
	}
	if err := pp.be.pop.Settle(rc.ctx(), sess.key.group, pp.queue, sess.holder, lock, batches); err != nil {
		return err
	}
	if pp.be.broker.Traced(pp.topic, "") {
		for _, b := range batches {
			for o := b.First; o <= b.Last; o++ {
				t := b.Types[0]
				if len(b.Types) > 1 {
					t = b.Types[o-b.First]
				}
				kind, detail := broker.TraceAcknowledged, ""
				switch t {
				case pop.AckAccept:
					detail = "share accept"
				case pop.AckReject:
					detail = "share reject (archived)"
				case pop.AckRelease:
					kind, detail = broker.TraceRetried, "share release"
				default:
					continue
				}
				pp.be.broker.TraceRecord(pp.topic, pp.index, o, broker.TraceEvent{Kind: kind, Protocol: "kafka",
					Group: sess.key.group, Client: rc.hdr.ClientID, Detail: detail})
			}
		}
	}
	return nil
}

// A share fetch's first read is sized for the records it wants:
// scanBytesPerRecord each, at least scanMinBytes.
const (
	scanBytesPerRecord = 256
	scanMinBytes       = 64 << 10
)

// shareAcquired is what one partition gave a share fetch.
type shareAcquired struct {
	runs    []pop.Acquired
	records []byte
	waitAt  model.QueueOffset // where new records would appear (-1: nothing to wait on)
}

// acquireShare acquires up to want records of a partition for the session's
// member, reading at most about budget bytes of new records (at least one
// batch), and encodes the batches holding them.
func (rc *reqCtx) acquireShare(sess *shareSession, pp part, set shareSettings, want, budget int) (shareAcquired, error) {
	out := shareAcquired{waitAt: -1}
	b := pp.be.broker
	start, hw, _, err := b.Offsets(pp.topic.Name, pp.index)
	if err != nil {
		return out, err
	}
	end := hw
	if set.committed {
		end = pp.be.txnIndex.LastStable(pp.queue, hw)
	}
	var cached []broker.StoredRecord
	var releases []func()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	scan := func(from model.QueueOffset, n int) ([]pop.Span, model.QueueOffset, error) {
		if from < start {
			return nil, start, nil // gone with retention
		}
		if from >= end {
			out.waitAt = from
			return nil, from, nil
		}
		// Read about what n records need, growing the reads while they
		// hold fewer: a read is checksummed whole, and reading the whole
		// byte budget for a few hundred records cost most of a fetch.
		var spans []pop.Span
		next, count, left := from, 0, max(budget, 1)
		chunk := min(max(n*scanBytesPerRecord, scanMinBytes), left)
		for count < n && next < end && left > 0 {
			res, err := b.Read(pp.topic.Name, pp.index, next, broker.ReadOptions{MaxBytes: chunk})
			if err != nil {
				if len(spans) > 0 || next > from {
					break
				}
				return nil, from, err
			}
			releases = append(releases, res.Release)
			cached = append(cached, res.Records...)
			read := 0
			for i := range res.Records {
				r := &res.Records[i]
				if r.BaseOffset >= end || count >= n {
					break
				}
				rEnd := r.BaseOffset + model.QueueOffset(r.Count)
				if rEnd <= next {
					continue
				}
				read += len(r.Payload)
				lo := max(r.BaseOffset, next)
				if shareVisible(b, pp.queue, r, set.committed) {
					if k := len(spans); k > 0 && spans[k-1].Last+1 == lo {
						spans[k-1].Last = rEnd - 1
					} else {
						spans = append(spans, pop.Span{First: lo, Last: rEnd - 1})
					}
					count += int(rEnd - lo)
				}
				next = rEnd
			}
			if read == 0 {
				break
			}
			left -= read
			chunk = min(chunk*2, max(left, 1))
		}
		return spans, next, nil
	}
	startAt := func() (model.QueueOffset, error) {
		switch {
		case set.reset == "earliest":
			return start, nil
		case strings.HasPrefix(set.reset, "by_duration:"):
			d, ok := parseISODuration(strings.TrimPrefix(set.reset, "by_duration:"))
			if !ok {
				return hw, nil
			}
			off, _, err := b.OffsetForTime(pp.topic.Name, pp.index, time.Now().Add(-d).UnixMilli())
			return off, err
		default:
			return hw, nil
		}
	}
	runs, err := pp.be.pop.Acquire(rc.ctx(), pop.Acquisition{Group: sess.key.group, Queue: pp.queue, Holder: sess.holder,
		Max: want, Lock: set.lock, DeliveryLimit: set.deliveryLimit, MaxInFlight: set.maxLocks,
		Start: startAt, Scan: scan})
	if err != nil || len(runs) == 0 {
		return out, err
	}
	out.runs = runs
	out.records, err = shareRecords(b, pp, runs, cached, budget)
	if b.Traced(pp.topic, "") {
		for _, r := range runs {
			for o := r.First; o <= r.Last; o++ {
				b.TraceRecord(pp.topic, pp.index, o, broker.TraceEvent{Kind: broker.TraceDelivered, Protocol: "kafka",
					Group: sess.key.group, Client: rc.hdr.ClientID, Attempt: r.DeliveryCount, Detail: "share fetch"})
			}
		}
	}
	return out, err
}

// shareVisible reports whether a stored record is delivered to share
// consumers: Kafka batches but transaction markers (and, read_committed,
// aborted batches), and other protocols' messages.
func shareVisible(b *broker.Broker, q model.QueueID, r *broker.StoredRecord, committed bool) bool {
	switch r.Format {
	case model.FormatMessage:
		return true
	case model.FormatKafkaBatchV2:
		if committed {
			return !b.HiddenKafkaBatch(q, r)
		}
		return len(r.Payload) < kbatch.HeaderSize || kbatch.ReadHeader(r.Payload).Attributes&kbatch.AttrControl == 0
	}
	return false
}

// shareRecords encodes the stored records holding the acquired runs, each
// once, in offset order: from the records the scan read where they hold
// them, read again otherwise (records handed out before).
func shareRecords(b *broker.Broker, pp part, runs []pop.Acquired, cached []broker.StoredRecord, budget int) ([]byte, error) {
	out := []byte{}
	covered := model.QueueOffset(0) // offsets below are encoded
	for _, run := range runs {
		for from := max(run.First, covered); from <= run.Last; from = max(from, covered) {
			recs, release, err := recordsAt(b, pp, from, cached, budget)
			if err != nil {
				return out, err
			}
			progressed := false
			for i := range recs {
				r := &recs[i]
				rEnd := r.BaseOffset + model.QueueOffset(r.Count)
				if rEnd <= from || r.BaseOffset < covered {
					continue
				}
				if r.BaseOffset > run.Last {
					break
				}
				if out, err = appendStoredAsBatches(out, r); err != nil {
					release()
					return out, err
				}
				covered, progressed = rEnd, true
			}
			release()
			if !progressed {
				break // gone (retention): the client acknowledges the gap
			}
		}
	}
	return out, nil
}

// recordsAt returns stored records from the one holding offset: from
// cached when it holds it, else read.
func recordsAt(b *broker.Broker, pp part, offset model.QueueOffset, cached []broker.StoredRecord, budget int) ([]broker.StoredRecord, func(), error) {
	for i := range cached {
		r := &cached[i]
		if r.BaseOffset <= offset && offset < r.BaseOffset+model.QueueOffset(r.Count) {
			return cached[i:], func() {}, nil
		}
	}
	res, err := b.Read(pp.topic.Name, pp.index, offset, broker.ReadOptions{MaxBytes: max(budget, 1)})
	if err != nil {
		return nil, func() {}, err
	}
	return res.Records, res.Release, nil
}
