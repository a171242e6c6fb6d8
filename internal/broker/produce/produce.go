// Package produce appends Kafka record batches to a partition: the broker's
// rules for what a producer sends, whichever front-end received it.
// Batches are validated (framing, magic 2, CRC32C, record count; no control
// batches; transactional or not as a whole) but never re-encoded: each is
// stored as received, its base offset and leader epoch written by storage.
// Idempotent batches are deduplicated per producer and partition (a
// retried batch gets its original offset, a gap OUT_OF_ORDER_SEQUENCE);
// transactional batches must come from the producer id and epoch of an open
// transaction that added the partition, and the partition's transaction
// index learns of a batch before it is appended, so the last stable offset
// never passes it. LogAppendTime topics get the append time and a
// recomputed CRC. Record keys go into the key index; compacted topics refuse
// records without a key, naming each (KIP-467). Records with timer headers
// are held in the broker's timer store (timers.go).
package produce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/model"
)

// Errors of a produce the front-end maps to its codes.
var (
	// ErrControlBatch is a control batch sent by a client.
	ErrControlBatch = errors.New("control batches are written by the broker only")
	// ErrMixedTransactional is a request mixing transactional and other
	// batches, or a transactional batch without a producer id.
	ErrMixedTransactional = errors.New("transactional and non-transactional batches mixed, or a transactional batch without a producer id")
	// ErrNoCoordinator is a transactional batch on a node without a
	// transaction coordinator.
	ErrNoCoordinator = errors.New("no transaction coordinator")
	// ErrIllegalTimer is a record whose timer header is out of range.
	ErrIllegalTimer = errors.New("timer header out of range")
)

// RecordErrors refuses a partition's records, naming the offending ones by
// their index in the request (KIP-467).
type RecordErrors struct {
	Indexes []int32
	Msg     string
}

func (e *RecordErrors) Error() string { return e.Msg }

// Verifier checks a transactional batch against the transaction
// coordinator of its transactional id: producer pid at epoch has queue in
// its open transaction.
type Verifier interface {
	Verify(ctx context.Context, txnID string, pid int64, epoch int16, queue model.QueueID) error
}

// Appender appends Kafka batches.
type Appender struct {
	b         *broker.Broker
	producers *producers.Manager
	index     *producers.TxnIndex
	txns      Verifier // nil: no transactions
	batches   *kbatch.Reader
	// traceParents decodes record headers to find a W3C traceparent
	// (tracing on): Result.TraceParent.
	traceParents bool
}

// FindTraceParents makes Append report the first record's W3C traceparent
// header (decoding headers, which it otherwise skips).
func (a *Appender) FindTraceParents() { a.traceParents = true }

// New returns an Appender; txns may be nil.
func New(b *broker.Broker, p *producers.Manager, index *producers.TxnIndex, txns Verifier, batches *kbatch.Reader) *Appender {
	return &Appender{b: b, producers: p, index: index, txns: txns, batches: batches}
}

// Result is what one partition's append did.
type Result struct {
	BaseOffset    model.QueueOffset // first offset written (or of the duplicate); -1 when none
	LogAppendTime int64             // the append time on LogAppendTime topics, else -1
	TraceParent   string            // the first record's traceparent header (FindTraceParents)
	// Stored are the batches this append stored (not retried duplicates,
	// not timer records): their first offsets and record counts.
	Stored []Stored
	end    model.LogPos       // the log end of what was written (0: nothing to wait for)
	ticket broker.WriteTicket // taken before anything was written
}

// Stored is a stored batch: its first offset and its record count.
type Stored struct {
	Base  model.QueueOffset
	Count int
}

// WaitDurable waits until what the results wrote is durable under the
// storage policy (fsynced in sync mode; at once in async).
func (a *Appender) WaitDurable(ctx context.Context, results ...Result) error {
	var end model.LogPos
	var tk broker.WriteTicket
	for i, r := range results {
		end = max(end, r.end)
		if i == 0 {
			// The first was taken first: a change after it fails the wait.
			tk = r.ticket
		}
	}
	if end == 0 {
		return nil
	}
	return a.b.WaitDurable(ctx, end, tk)
}

// Append appends the record batches of one request to a topic's partition;
// records is the request's record set, txnID its transactional id ("" for
// none). The caller checks authorization and quotas.
func (a *Appender) Append(ctx context.Context, t *broker.Topic, partition int32, records []byte, txnID string) (Result, error) {
	return a.AppendKeyed(ctx, t, partition, records, txnID, nil)
}

// AppendKeyed is Append storing one more key with the last batch (another
// protocol's producer identity, read back from the stored record).
func (a *Appender) AppendKeyed(ctx context.Context, t *broker.Topic, partition int32, records []byte, txnID string, key []byte) (Result, error) {
	res := Result{BaseOffset: -1, LogAppendTime: -1, ticket: a.b.Ticket()}
	if _, ok := t.Queue(partition); !ok {
		return res, model.ErrUnknownQueue
	}
	if t.Away(partition) {
		return res, model.ErrQueueMoved
	}
	if t.Internal {
		return res, fmt.Errorf("%w: cannot append to internal topic %s", model.ErrInvalidTopic, t.Name)
	}
	batches, hdrs, err := kbatch.Split(records)
	if err != nil {
		return res, err
	}
	if max := t.Config.MaxMessageBytes; max > 0 {
		for _, b := range batches {
			if len(b) > int(max) {
				return res, model.ErrMessageTooLarge
			}
		}
	}
	transactional := hdrs[0].Attributes&kbatch.AttrTransactional != 0
	for _, h := range hdrs {
		if h.Attributes&kbatch.AttrControl != 0 {
			return res, ErrControlBatch
		}
		if (h.Attributes&kbatch.AttrTransactional != 0) != transactional || (transactional && h.ProducerID < 0) {
			return res, ErrMixedTransactional
		}
	}
	logAppend := t.Config.TimestampType == "LogAppendTime"
	now := a.b.Now().UnixMilli()
	recs := make([]*broker.Record, len(batches))
	for i, b := range batches {
		if logAppend {
			setLogAppendTime(b, now)
			hdrs[i].MaxTimestamp = now
		}
		recs[i] = &broker.Record{Format: model.FormatKafkaBatchV2, Flags: broker.FlagPayloadOffset,
			Count: uint32(hdrs[i].NumRecords), Timestamp: hdrs[i].MaxTimestamp, Payload: b,
			// The batch CRC (verified by kbatch.Split, recomputed by
			// setLogAppendTime) covers b[21:]: storage combines it.
			PayloadTailFrom: kbatch.CRCFrom, PayloadTailCRC: binary.BigEndian.Uint32(b[17:])}
	}
	timers, traceParent, err := a.scanKeys(batches, recs, t, partition, strings.Contains(t.Config.CleanupPolicy, "compact"))
	if err != nil {
		return res, err
	}
	res.TraceParent = traceParent
	if key != nil {
		last := recs[len(recs)-1]
		last.Keys = append(last.Keys, broker.Key{Key: key})
	}
	if logAppend {
		res.LogAppendTime = now
	}
	switch {
	case timers && !transactional:
		res.BaseOffset, err = a.appendTimers(ctx, t, partition, batches, hdrs)
		return res, err
	case hdrs[0].ProducerID >= 0:
		return a.appendIdempotent(ctx, t, partition, recs, hdrs, txnID, res)
	}
	if err := a.b.Append(ctx, t.Name, partition, recs, broker.AppendOptions{NoWait: true}); err != nil {
		return res, err
	}
	last := recs[len(recs)-1]
	res.BaseOffset, res.end = recs[0].BaseOffset, last.Pos+model.LogPos(last.Size)
	for i, r := range recs {
		res.Stored = append(res.Stored, Stored{Base: r.BaseOffset, Count: int(hdrs[i].NumRecords)})
	}
	return res, nil
}

// appendIdempotent checks each batch's sequence against the producer's
// state, skips retried duplicates, and records what it wrote.
func (a *Appender) appendIdempotent(ctx context.Context, t *broker.Topic, partition int32, recs []*broker.Record,
	hdrs []kbatch.Header, txnID string, res Result) (Result, error) {
	queue, _ := t.Queue(partition)
	pid := hdrs[0].ProducerID
	if hdrs[0].Attributes&kbatch.AttrTransactional != 0 {
		if a.txns == nil {
			return res, ErrNoCoordinator
		}
		if err := a.txns.Verify(ctx, txnID, pid, hdrs[0].ProducerEpoch, queue); err != nil {
			return res, err
		}
	}
	st := a.producers.Acquire(queue, pid)
	defer st.Unlock()
	if st.Empty() {
		// A queue moved here: its previous group may know the producer.
		if ex, ok := a.b.PriorProducerState(ctx, t, partition, pid); ok {
			st.Adopt(ex)
		}
	}
	var toWrite []*broker.Record
	var toHdr []kbatch.Header
	dupOffset := model.QueueOffset(-1)
	for i, h := range hdrs {
		if h.ProducerID != pid {
			return res, &kbatch.Error{Reason: "batches of several producers in one partition"}
		}
		off, dup, err := st.Check(h.ProducerEpoch, h.BaseSequence, h.LastSequence())
		if err != nil {
			return res, err
		}
		if dup {
			if i == 0 {
				dupOffset = off
			}
			continue
		}
		toWrite = append(toWrite, recs[i])
		toHdr = append(toHdr, h)
	}
	if len(toWrite) == 0 {
		// A retry of batches already written: answered once the originals
		// are as durable as a first answer would have made them (they may
		// still be waiting for their fsync, or, in a cluster, their commit).
		res.BaseOffset = dupOffset
		res.end = a.b.WrittenEnd()
		return res, nil
	}
	var provisional model.QueueOffset
	opened := false
	if hdrs[0].Attributes&kbatch.AttrTransactional != 0 {
		// Known to the index before it can be read: the last stable offset
		// stays at or below the batch (corrected once its offset is known).
		var err error
		if _, _, provisional, err = a.b.Offsets(t.Name, partition); err != nil {
			return res, err
		}
		opened = a.index.Begin(queue, pid, provisional)
	}
	if err := a.b.Append(ctx, t.Name, partition, toWrite, broker.AppendOptions{NoWait: true}); err != nil {
		if opened {
			a.index.Unbegin(queue, pid)
		}
		return res, err
	}
	if opened {
		a.index.Placed(queue, pid, provisional, toWrite[0].BaseOffset)
	}
	for i, r := range toWrite {
		h := toHdr[i]
		st.Record(producers.Batch{Epoch: h.ProducerEpoch, FirstSeq: h.BaseSequence, LastSeq: h.LastSequence(), BaseOffset: r.BaseOffset}, r.StoreTime)
		res.Stored = append(res.Stored, Stored{Base: r.BaseOffset, Count: int(h.NumRecords)})
	}
	res.BaseOffset = toWrite[0].BaseOffset
	if dupOffset >= 0 {
		res.BaseOffset = dupOffset
	}
	last := toWrite[len(toWrite)-1]
	res.end = last.Pos + model.LogPos(last.Size)
	return res, nil
}

// Key index limits for Kafka records: longer keys are not indexed, and a
// batch indexes keys up to a total size (the keys are stored beside it).
const (
	maxIndexedKeyLen   = 512
	maxIndexedKeyBytes = 64 << 10
)

// timerMarker starts every timer header name (TIMER_DELIVER_MS,
// TIMER_DELAY_SEC, TIMER_DELAY_MS): batches without it anywhere have none.
var timerMarker = []byte("TIMER_")

// scanKeys decodes each batch once to put its record keys into the key
// index (so RocketMQ's QUERY_MESSAGE finds a Kafka record by its key) and,
// for compacted topics, to refuse records without a key, naming each one.
// It reports whether a batch may carry timer headers.
func (a *Appender) scanKeys(batches [][]byte, recs []*broker.Record, t *broker.Topic, partition int32, compacted bool) (bool, string, error) {
	var bad []int32
	timers := false
	traceParent := ""
	for bi, b := range batches {
		i, size := int32(0), 0
		var keys []broker.Key
		var arena []byte
		found, err := a.batches.RecordsFind(b, a.traceParents, timerMarker, func(r *kbatch.Record) bool {
			if a.traceParents && traceParent == "" {
				for _, h := range r.Headers {
					if h.Key == "traceparent" {
						traceParent = string(h.Value)
					}
				}
			}
			if r.KeyNull {
				bad = append(bad, i)
			} else if n := len(r.Key); n > 0 && n <= maxIndexedKeyLen && size+n <= maxIndexedKeyBytes {
				size += n
				arena = append(arena, r.Key...)
				keys = append(keys, broker.Key{Delta: uint32(r.OffsetDelta), Key: arena[len(arena)-n : len(arena) : len(arena)]})
			}
			i++
			return true
		})
		if err != nil {
			return false, "", &kbatch.Error{Reason: err.Error(), Corrupt: true}
		}
		timers = timers || found
		if len(keys) > 0 {
			// The arena may have moved while growing: point keys at its final bytes.
			at := 0
			for k := range keys {
				n := len(keys[k].Key)
				keys[k].Key = arena[at : at+n : at+n]
				at += n
			}
			recs[bi].Keys = keys
		}
	}
	if !compacted || len(bad) == 0 {
		return timers, traceParent, nil
	}
	return false, "", &RecordErrors{Indexes: bad,
		Msg: fmt.Sprintf("compacted topic cannot accept a record without a key in topic partition %s-%d", t.Name.Short(), partition)}
}

// setLogAppendTime stamps a batch with the broker's time, as Kafka does for
// LogAppendTime topics, and recomputes its CRC.
func setLogAppendTime(b []byte, now int64) {
	attrs := binary.BigEndian.Uint16(b[21:]) | kbatch.AttrLogAppendTime
	binary.BigEndian.PutUint16(b[21:], attrs)
	binary.BigEndian.PutUint64(b[35:], uint64(now))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[kbatch.CRCFrom:], kbatch.CRC32C))
}

// Record is one Kafka record batch of a front-end's own making as the
// record storage appends, validated as Append validates a producer's, for
// a caller that appends it together with records of other queues in one
// append (a state change that must land with the message, or not at
// all). The caller sets its queue. Batches with keys, timer headers or a
// producer id belong in Append.
func Record(batch []byte) (*broker.Record, error) {
	batches, hdrs, err := kbatch.Split(batch)
	if err != nil {
		return nil, err
	}
	if len(batches) != 1 || hdrs[0].Attributes&(kbatch.AttrControl|kbatch.AttrTransactional) != 0 || hdrs[0].ProducerID >= 0 {
		return nil, fmt.Errorf("%w: one plain batch expected", model.ErrCorruptRecord)
	}
	return &broker.Record{Format: model.FormatKafkaBatchV2, Flags: broker.FlagPayloadOffset, Count: uint32(hdrs[0].NumRecords),
		Timestamp: hdrs[0].MaxTimestamp, Payload: batches[0], PayloadTailFrom: kbatch.CRCFrom,
		PayloadTailCRC: binary.BigEndian.Uint32(batches[0][17:])}, nil
}
