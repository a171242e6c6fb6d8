package kafka

import (
	"container/list"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Incremental fetch sessions (KIP-227). A session remembers the partitions a
// consumer fetches, so incremental requests name only what changed and
// responses carry only partitions with news. Sessions are broker-wide,
// bounded in number and evicted least recently used first.

const maxFetchSessions = 1000

// sessionPartition is one partition in a session.
type sessionPartition struct {
	topic      string // Kafka topic name
	topicID    [16]byte
	partition  int32
	offset     int64
	maxBytes   int32
	leaderEp   int32 // the client's current leader epoch (KIP-320)
	lastHW     int64
	lastLSO    int64
	lastStart  int64
	everAnswer bool
}

type sessionKey struct {
	topic     string
	partition int32
}

type fetchSession struct {
	mu    sync.Mutex // held while a request uses the session
	id    int32
	epoch int32 // the epoch the next request must carry
	parts map[sessionKey]*sessionPartition
	order []sessionKey
	elem  *list.Element
}

type fetchSessions struct {
	mu   sync.Mutex
	next int32
	byID map[int32]*fetchSession
	lru  *list.List
}

func newFetchSessions() *fetchSessions {
	return &fetchSessions{byID: map[int32]*fetchSession{}, lru: list.New()}
}

// create opens a new session and evicts the oldest past the bound.
func (fs *fetchSessions) create() *fetchSession {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.next++
	if fs.next <= 0 {
		fs.next = 1
	}
	s := &fetchSession{id: fs.next, epoch: 1, parts: map[sessionKey]*sessionPartition{}}
	s.elem = fs.lru.PushFront(s)
	fs.byID[s.id] = s
	for len(fs.byID) > maxFetchSessions {
		old := fs.lru.Back().Value.(*fetchSession)
		fs.lru.Remove(old.elem)
		delete(fs.byID, old.id)
	}
	return s
}

func (fs *fetchSessions) remove(id int32) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if s, ok := fs.byID[id]; ok {
		fs.lru.Remove(s.elem)
		delete(fs.byID, id)
	}
}

// lookup finds a session for an incremental request and checks its epoch.
func (fs *fetchSessions) lookup(id, epoch int32) (*fetchSession, int16) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s, ok := fs.byID[id]
	if !ok {
		return nil, kerr.FetchSessionIDNotFound.Code
	}
	if s.epoch != epoch {
		return nil, kerr.InvalidFetchSessionEpoch.Code
	}
	fs.lru.MoveToFront(s.elem)
	return s, 0
}

// update applies a request's partitions and forgotten topics to a session.
func (s *fetchSession) update(req *kmsg.FetchRequest, names func([16]byte) string) {
	for _, rt := range req.Topics {
		topic := rt.Topic
		if req.Version >= 13 {
			topic = names(rt.TopicID)
		}
		for _, rp := range rt.Partitions {
			k := sessionKey{topic, rp.Partition}
			p, ok := s.parts[k]
			if !ok {
				p = &sessionPartition{topic: topic, topicID: rt.TopicID, partition: rp.Partition, lastHW: -1, lastLSO: -1, lastStart: -1}
				s.parts[k] = p
				s.order = append(s.order, k)
			}
			p.offset, p.maxBytes, p.leaderEp = rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch
		}
	}
	for _, ft := range req.ForgottenTopics {
		topic := ft.Topic
		if req.Version >= 13 {
			topic = names(ft.TopicID)
		}
		for _, part := range ft.Partitions {
			delete(s.parts, sessionKey{topic, part})
		}
	}
	kept := s.order[:0]
	for _, k := range s.order {
		if _, ok := s.parts[k]; ok {
			kept = append(kept, k)
		}
	}
	s.order = kept
}

// asRequest rebuilds a full request from the session's partitions.
func (s *fetchSession) asRequest(req *kmsg.FetchRequest) *kmsg.FetchRequest {
	full := *req
	full.Topics = nil
	idx := map[string]int{}
	for _, k := range s.order {
		p := s.parts[k]
		i, ok := idx[p.topic]
		if !ok {
			i = len(full.Topics)
			idx[p.topic] = i
			ft := kmsg.NewFetchRequestTopic()
			ft.Topic = p.topic
			ft.TopicID = p.topicID
			full.Topics = append(full.Topics, ft)
		}
		part := kmsg.NewFetchRequestTopicPartition()
		part.Partition = p.partition
		part.FetchOffset = p.offset
		part.PartitionMaxBytes = p.maxBytes
		part.CurrentLeaderEpoch = p.leaderEp
		part.LastFetchedEpoch = -1
		full.Topics[i].Partitions = append(full.Topics[i].Partitions, part)
	}
	return &full
}

// filter keeps only partitions with records, errors or changed offsets, and
// remembers what each answered.
func (s *fetchSession) filter(resp *kmsg.FetchResponse, incremental bool) {
	kept := resp.Topics[:0]
	for _, t := range resp.Topics {
		parts := t.Partitions[:0]
		for _, p := range t.Partitions {
			sp := s.parts[sessionKey{t.Topic, p.Partition}]
			changed := sp == nil || !sp.everAnswer || len(p.RecordBatches) > 0 || p.ErrorCode != 0 ||
				sp.lastHW != p.HighWatermark || sp.lastLSO != p.LastStableOffset || sp.lastStart != p.LogStartOffset
			if sp != nil {
				sp.lastHW, sp.lastLSO, sp.lastStart, sp.everAnswer = p.HighWatermark, p.LastStableOffset, p.LogStartOffset, true
			}
			if changed || !incremental {
				parts = append(parts, p)
			}
		}
		if len(parts) > 0 || !incremental {
			t.Partitions = parts
			kept = append(kept, t)
		}
	}
	resp.Topics = kept
}
