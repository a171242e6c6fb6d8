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
	stats := &topicStats{}
	parts := map[string]*topicStats{}
	for _, i := range idx {
		part := s.queueStats(t, i)
		stats.add(part)
		parts[TopicRef{Name: t.Name, Partition: s.globalIndex(t, i)}.String()] = part
	}
	if ref.Partition < 0 && len(t.All) > 1 {
		stats.Metadata = &topicMetadata{Partitions: len(t.All)}
		if r.URL.Query().Get("perPartition") != "false" {
			stats.Partitions = parts
		}
	}
	adminJSON(w, stats)
}

// topicStats is a topic's, or one of its partitions', stats in Pulsar's
// shape (rates are not sampled: 0).
type topicStats struct {
	MsgRateIn            float64                       `json:"msgRateIn"`
	MsgThroughputIn      float64                       `json:"msgThroughputIn"`
	MsgRateOut           float64                       `json:"msgRateOut"`
	MsgThroughputOut     float64                       `json:"msgThroughputOut"`
	BytesInCounter       int64                         `json:"bytesInCounter"`
	MsgInCounter         int64                         `json:"msgInCounter"`
	BytesOutCounter      int64                         `json:"bytesOutCounter"`
	MsgOutCounter        int64                         `json:"msgOutCounter"`
	AverageMsgSize       float64                       `json:"averageMsgSize"`
	MsgChunkPublished    bool                          `json:"msgChunkPublished"`
	StorageSize          int64                         `json:"storageSize"`
	BacklogSize          int64                         `json:"backlogSize"`
	OffloadedStorageSize int64                         `json:"offloadedStorageSize"`
	Publishers           []map[string]any              `json:"publishers"`
	WaitingPublishers    int                           `json:"waitingPublishers"`
	Subscriptions        map[string]*subscriptionStats `json:"subscriptions"`
	Replication          map[string]any                `json:"replication"`
	DeduplicationStatus  string                        `json:"deduplicationStatus"`
	NonContiguousRanges  int                           `json:"nonContiguousDeletedMessagesRanges"`
	Metadata             *topicMetadata                `json:"metadata,omitempty"`
	Partitions           map[string]*topicStats        `json:"partitions,omitempty"`
}

// topicMetadata is a partitioned topic's metadata in its stats.
type topicMetadata struct {
	Partitions int `json:"partitions"`
}

// subscriptionStats is one subscription's stats over a topic's queues.
type subscriptionStats struct {
	MsgRateOut          float64          `json:"msgRateOut"`
	MsgThroughputOut    float64          `json:"msgThroughputOut"`
	MsgBacklog          int64            `json:"msgBacklog"`
	MsgBacklogNoDelayed int64            `json:"msgBacklogNoDelayed"`
	BacklogSize         int64            `json:"backlogSize"`
	UnackedMessages     int              `json:"unackedMessages"`
	Type                string           `json:"type"`
	IsDurable           bool             `json:"isDurable"`
	IsReplicated        bool             `json:"isReplicated"`
	Consumers           []map[string]any `json:"consumers"`
	MsgRateExpired      float64          `json:"msgRateExpired"`
	BlockedOnUnacked    bool             `json:"blockedSubscriptionOnUnackedMsgs"`
	ActiveConsumerName  string           `json:"activeConsumerName"`
}

// add sums o's counters, publishers and subscriptions into ts (the stats
// of a partitioned topic are its partitions' summed).
func (ts *topicStats) add(o *topicStats) {
	ts.BytesInCounter += o.BytesInCounter
	ts.MsgInCounter += o.MsgInCounter
	ts.StorageSize += o.StorageSize
	ts.Publishers = append(ts.Publishers, o.Publishers...)
	if ts.Publishers == nil {
		ts.Publishers = []map[string]any{}
	}
	if ts.Subscriptions == nil {
		ts.Subscriptions = map[string]*subscriptionStats{}
	}
	for name, os := range o.Subscriptions {
		ss := ts.Subscriptions[name]
		if ss == nil {
			ss = &subscriptionStats{Type: os.Type, IsDurable: os.IsDurable, Consumers: []map[string]any{}}
			ts.Subscriptions[name] = ss
		}
		ss.MsgBacklog += os.MsgBacklog
		ss.MsgBacklogNoDelayed += os.MsgBacklogNoDelayed
		ss.UnackedMessages += os.UnackedMessages
		ss.Consumers = append(ss.Consumers, os.Consumers...)
		if ss.ActiveConsumerName == "" {
			ss.ActiveConsumerName = os.ActiveConsumerName
		}
		if len(os.Consumers) > 0 {
			ss.Type, ss.IsDurable = os.Type, os.IsDurable
		}
	}
	for name, p := range o.Partitions {
		if ts.Partitions == nil {
			ts.Partitions = map[string]*topicStats{}
		}
		ts.Partitions[name] = p
	}
	if o.Metadata != nil {
		ts.Metadata = o.Metadata
	}
	ts.DeduplicationStatus, ts.Replication = "Enabled", map[string]any{}
}

// queueStats describes one of a topic's queues.
func (s *Server) queueStats(t *broker.Topic, i int32) *topicStats {
	msgs, size := s.queueTotals(t, []int32{i})
	publishers := []map[string]any{}
	q, _ := t.Queue(i)
	for _, p := range s.live.producersOf(q) {
		publishers = append(publishers, map[string]any{"producerId": p.id, "producerName": p.name, "accessMode": "Shared",
			"metadata": p.meta, "address": p.c.nc.RemoteAddr().String(), "connectedSince": p.since.UTC().Format(time.RFC3339Nano),
			"clientVersion": p.c.clientName, "msgRateIn": 0, "msgThroughputIn": 0, "averageMsgSize": 0})
	}
	subs := map[string]*subscriptionStats{}
	for _, name := range s.subscriptionNames(t, []int32{i}) {
		subs[name] = s.subscriptionStats(t, i, name)
	}
	return &topicStats{BytesInCounter: size, MsgInCounter: msgs, StorageSize: size, Publishers: publishers,
		Subscriptions: subs, Replication: map[string]any{}, DeduplicationStatus: "Enabled"}
}

// subscriptionStats describes one subscription on a topic's queue i.
func (s *Server) subscriptionStats(t *broker.Topic, i int32, name string) *subscriptionStats {
	ss := &subscriptionStats{Type: "Exclusive", IsDurable: true, Consumers: []map[string]any{}}
	_, hw, _, err := s.b.Offsets(t.Name, i)
	if err != nil {
		return ss
	}
	if pos, ok := s.subscriptionPosition(t, i, name); ok {
		ss.MsgBacklog = int64(max(hw-pos, 0))
		ss.MsgBacklogNoDelayed = ss.MsgBacklog
	}
	q, _ := t.Queue(i)
	s.subs.mu.Lock()
	sub := s.subs.m[subKey{queue: q, name: name}]
	s.subs.mu.Unlock()
	if sub == nil {
		return ss
	}
	ss.IsDurable = sub.base().durable
	switch {
	case sub.base().keyShared:
		ss.Type = "Key_Shared"
	case sub.base().shared:
		ss.Type = "Shared"
	default:
		if o, ok := sub.(*subscription); ok {
			ss.Type = o.typeName()
		}
	}
	for _, v := range sub.consumerViews() {
		if v.active && !sub.base().shared {
			ss.ActiveConsumerName = v.co.name
		}
		ss.UnackedMessages += v.unacked
		ss.Consumers = append(ss.Consumers, map[string]any{"consumerName": v.co.name, "availablePermits": v.permits,
			"unackedMessages": v.unacked, "metadata": v.co.meta, "address": v.co.c.nc.RemoteAddr().String(),
			"connectedSince": v.co.since.UTC().Format(time.RFC3339Nano), "clientVersion": v.co.c.clientName,
			"msgRateOut": 0, "msgThroughputOut": 0, "blockedConsumerOnUnackedMsgs": false})
	}
	return ss
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
