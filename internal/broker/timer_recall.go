package broker

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// Recall. A timer message not delivered yet is cancelled by appending a
// tombstone to the timer log: due in the same second and linked into its
// list, so walking the list (newest first) meets the tombstone before the
// entry it cancels, also after a restart. Until its second is taken, the
// tombstone is all there is; once taken, the entry is dropped from the
// heap.

// headerTimerCancel marks a tombstone and names the entry it cancels.
const headerTimerCancel = "__ROSETTA_TIMER_CANCEL"

// RecallHandle is the handle a timer message's send answers: base64url of
// "v1 <topic> <broker> <due ms> <message id>", the form RocketMQ's
// RecallMessageHandle uses (topic as the client names it).
func RecallHandle(topic, brokerName string, due int64, id string) string {
	return base64.URLEncoding.EncodeToString([]byte("v1 " + topic + " " + brokerName + " " + strconv.FormatInt(due, 10) + " " + id))
}

// ErrBadRecallHandle is a recall handle that does not parse.
var ErrBadRecallHandle = errors.New("recall handle is not valid")

// ParseRecallHandle reads a recall handle (padded or not).
func ParseRecallHandle(h string) (topic string, due int64, id string, err error) {
	raw, err := base64.URLEncoding.DecodeString(h)
	if err != nil {
		raw, err = base64.RawURLEncoding.DecodeString(h)
	}
	parts := strings.Split(string(raw), " ")
	if err != nil || len(parts) != 5 || parts[0] != "v1" {
		return "", 0, "", ErrBadRecallHandle
	}
	if due, err = strconv.ParseInt(parts[3], 10, 64); err != nil {
		return "", 0, "", ErrBadRecallHandle
	}
	return parts[1], due, parts[4], nil
}

// ErrTimerNotPending is a recall of a timer message that is not waiting
// (never sent, delivered already, or recalled already).
var ErrTimerNotPending = errors.New("no pending timer message")

// RecallTimer cancels the pending timer message of topic with unique id
// (its UNIQ_KEY) due at due (ms; 0: whenever it is due).
func (b *Broker) RecallTimer(ctx context.Context, topic model.TopicName, id string, due int64) error {
	w := b.timers
	var target model.QueueOffset = -1
	for _, h := range b.LookupKey([]byte(id), 16, 0, 0) {
		if h.Queue != w.queue {
			continue
		}
		payload, entryDue, err := b.timerPayloadAt(h.Offset)
		if err != nil || due > 0 && entryDue != due {
			continue
		}
		m, err := DecodeMessage(payload)
		if err != nil {
			continue
		}
		dest, _ := m.Header(HeaderRealTopic)
		uniq, _ := m.Header(HeaderUniqKey)
		if string(dest) == topic.String() && string(uniq) == id {
			target, due = h.Offset, entryDue
			break
		}
	}
	if target < 0 {
		return fmt.Errorf("%w: %s in %s due at %d", ErrTimerNotPending, id, topic, due)
	}
	sec := due / 1000
	w.mu.Lock()
	defer w.mu.Unlock()
	if (timerEntry{due: due, offset: target}).before(w.cursor) || w.cancelled[target] {
		return fmt.Errorf("%w: %s delivered or recalled already", ErrTimerNotPending, id)
	}
	if sec < w.taken && sec != w.walking { // (a second being read skips it through cancelled)
		i := w.near.find(target)
		if i < 0 {
			return fmt.Errorf("%w: %s delivered already", ErrTimerNotPending, id)
		}
		w.near.remove(i)
		delete(w.payloads, target)
	}
	prev, ok := w.heads[sec]
	if !ok {
		prev = -1
	}
	tomb := model.Message{Headers: []model.Header{
		{Key: headerTimerCancel, Value: []byte(strconv.FormatInt(int64(target), 10))},
		{Key: headerTimerPrev, Value: []byte(strconv.FormatInt(int64(prev), 10))}}}
	r := &storage.Record{Queue: w.queue, Format: model.FormatMessage, Count: 1, Timestamp: due, TagHash: uint64(due),
		Payload: EncodeMessage(nil, &tomb)}
	if err := b.engine.AppendWith(ctx, []*storage.Record{r}, storage.AppendOptions{}); err != nil {
		return err
	}
	w.heads[sec] = r.BaseOffset
	w.cancelled[target] = true
	b.log.Info("timer message recalled", "topic", topic.String(), "id", id, "due", due)
	return nil
}

// timerPayloadAt reads a timer entry's payload (a copy) and due time.
func (b *Broker) timerPayloadAt(off model.QueueOffset) ([]byte, int64, error) {
	res, err := b.engine.Read(b.timers.queue, off, storage.ReadOptions{MaxRecords: 1})
	if err != nil {
		return nil, 0, err
	}
	defer res.Release()
	if len(res.Records) == 0 || res.Records[0].BaseOffset != off {
		return nil, 0, fmt.Errorf("%w: no timer entry at %d", model.ErrCorruptRecord, off)
	}
	return append([]byte(nil), res.Records[0].Payload...), res.Records[0].Timestamp, nil
}

func (h timerHeap) find(off model.QueueOffset) int {
	for i, e := range h {
		if e.offset == off {
			return i
		}
	}
	return -1
}
