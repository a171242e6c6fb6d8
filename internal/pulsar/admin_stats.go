package pulsar

import (
	"fmt"
	"net/http"
	"time"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Topic stats and internal stats in Pulsar's shapes, from the queues'
// offsets and sizes, the connected producers and consumers, and the
// subscriptions' positions. Rates are not sampled here (0); counters are
// totals since the queue began.

// queueTotals sums a topic's queues' message counts and sizes.
func (s *Server) queueTotals(t *broker.Topic, idx []int32) (msgs, bytes int64) {
	_, per := s.b.TopicBytes(t)
	for _, i := range idx {
		if _, hw, _, err := s.b.Offsets(t.Name, i); err == nil {
			msgs += int64(hw)
		}
		if int(i) < len(per) {
			bytes += per[i]
		}
	}
	return msgs, bytes
}

func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	t, idx, ref, err := s.pathQueues(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	stats := s.topicStats(t, idx)
	if ref.Partition < 0 && len(t.All) > 1 {
		stats["metadata"] = map[string]any{"partitions": len(t.All)}
		if r.URL.Query().Get("perPartition") != "false" {
			parts := map[string]any{}
			for _, i := range idx {
				parts[TopicRef{Name: t.Name, Partition: int(i)}.String()] = s.topicStats(t, []int32{i})
			}
			stats["partitions"] = parts
		}
	}
	adminJSON(w, stats)
}

// topicStats describes a topic's queues idx.
func (s *Server) topicStats(t *broker.Topic, idx []int32) map[string]any {
	msgs, size := s.queueTotals(t, idx)
	publishers := []map[string]any{}
	for _, i := range idx {
		q, _ := t.Queue(i)
		for _, p := range s.live.producersOf(q) {
			publishers = append(publishers, map[string]any{"producerId": p.id, "producerName": p.name, "accessMode": "Shared",
				"metadata": p.meta, "address": p.c.nc.RemoteAddr().String(), "connectedSince": p.since.UTC().Format(time.RFC3339Nano),
				"clientVersion": p.c.clientName, "msgRateIn": 0, "msgThroughputIn": 0, "averageMsgSize": 0})
		}
	}
	subs := map[string]any{}
	for _, name := range s.subscriptionNames(t, idx) {
		subs[name] = s.subscriptionStats(t, idx, name)
	}
	return map[string]any{
		"msgRateIn": 0, "msgThroughputIn": 0, "msgRateOut": 0, "msgThroughputOut": 0,
		"bytesInCounter": size, "msgInCounter": msgs, "bytesOutCounter": 0, "msgOutCounter": 0,
		"averageMsgSize": 0, "msgChunkPublished": false, "storageSize": size, "backlogSize": 0, "offloadedStorageSize": 0,
		"publishers": publishers, "waitingPublishers": 0, "subscriptions": subs, "replication": map[string]any{},
		"deduplicationStatus": "Enabled", "nonContiguousDeletedMessagesRanges": 0,
	}
}

// subscriptionStats describes one subscription over a topic's queues.
func (s *Server) subscriptionStats(t *broker.Topic, idx []int32, name string) map[string]any {
	backlog, unacked := int64(0), 0
	typ, durable, active := "Exclusive", true, ""
	consumers := []map[string]any{}
	for _, i := range idx {
		_, hw, _, err := s.b.Offsets(t.Name, i)
		if err != nil {
			continue
		}
		if pos, ok := s.subscriptionPosition(t, i, name); ok {
			backlog += int64(max(hw-pos, 0))
		}
		q, _ := t.Queue(i)
		s.subs.mu.Lock()
		sub := s.subs.m[subKey{queue: q, name: name}]
		s.subs.mu.Unlock()
		if sub == nil {
			continue
		}
		durable = sub.base().durable
		switch {
		case sub.base().keyShared:
			typ = "Key_Shared"
		case sub.base().shared:
			typ = "Shared"
		default:
			if o, ok := sub.(*subscription); ok {
				typ = o.typeName()
			}
		}
		for _, v := range sub.consumerViews() {
			if v.active && !sub.base().shared {
				active = v.co.name
			}
			unacked += v.unacked
			consumers = append(consumers, map[string]any{"consumerName": v.co.name, "availablePermits": v.permits,
				"unackedMessages": v.unacked, "metadata": v.co.meta, "address": v.co.c.nc.RemoteAddr().String(),
				"connectedSince": v.co.since.UTC().Format(time.RFC3339Nano), "clientVersion": v.co.c.clientName,
				"msgRateOut": 0, "msgThroughputOut": 0, "blockedConsumerOnUnackedMsgs": false})
		}
	}
	return map[string]any{"msgRateOut": 0, "msgThroughputOut": 0, "msgBacklog": backlog, "msgBacklogNoDelayed": backlog,
		"backlogSize": 0, "unackedMessages": unacked, "type": typ, "isDurable": durable, "isReplicated": false,
		"consumers": consumers, "msgRateExpired": 0, "blockedSubscriptionOnUnackedMsgs": false, "activeConsumerName": active}
}

func (s *Server) adminInternalStats(w http.ResponseWriter, r *http.Request) {
	t, idx, _, err := s.pathQueues(r)
	if err != nil {
		adminFail(w, err)
		return
	}
	i := idx[0]
	start, hw, _, err := s.b.Offsets(t.Name, i)
	if err != nil {
		adminFail(w, err)
		return
	}
	_, size := s.queueTotals(t, []int32{i})
	ledger := ledgerID(t)
	pos := func(off model.QueueOffset) string { return fmt.Sprintf("%d:%d", ledger, int64(off)-1) }
	cursors := map[string]any{}
	for _, name := range s.subscriptionNames(t, []int32{i}) {
		p, _ := s.subscriptionPosition(t, i, name)
		cursors[name] = map[string]any{"markDeletePosition": pos(p), "readPosition": fmt.Sprintf("%d:%d", ledger, p),
			"waitingReadOp": false, "pendingReadOps": 0, "messagesConsumedCounter": int64(p), "cursorLedger": -1,
			"cursorLedgerLastEntry": -1, "individuallyDeletedMessages": "[]", "state": "Open",
			"numberOfEntriesSinceFirstNotAckedMessage": int64(max(hw-p, 0)) + 1, "totalNonContiguousDeletedMessagesRange": 0,
			"properties": map[string]any{}}
	}
	adminJSON(w, map[string]any{
		"entriesAddedCounter": int64(hw), "numberOfEntries": int64(hw - start), "totalSize": size,
		"currentLedgerEntries": int64(hw - start), "currentLedgerSize": size,
		"lastLedgerCreatedTimestamp": time.UnixMilli(t.CreatedMs).UTC().Format(time.RFC3339Nano),
		"waitingCursorsCount":        0, "pendingAddEntriesCount": 0, "lastConfirmedEntry": pos(hw), "state": "LedgerOpened",
		"ledgers":       []map[string]any{{"ledgerId": ledger, "entries": int64(hw - start), "size": size, "offloaded": false}},
		"cursors":       cursors,
		"schemaLedgers": []any{}, "compactedLedger": map[string]any{"ledgerId": -1, "entries": -1, "size": -1, "offloaded": false},
	})
}
