package pulsar

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Broker-side de-duplication, as Pulsar's: a queue remembers the highest
// sequence id each producer name has stored, and a SEND whose sequence ids
// are not above it is a duplicate — acknowledged, not stored again. Each
// stored batch carries its producer's identity as a record key (stored
// beside the batch, never shown to clients), so the table is rebuilt from
// the queue's tail after a restart or, in a cluster, on a new leader: a
// producer that resends after reconnecting creates no duplicate.

// identityPrefix starts the key a Pulsar batch's identity is stored as.
const identityPrefix = "\x00pulsar\x00"

// identity is a stored batch's producer, sequence ids and publish time
// (records without an event time carry the publish time as their
// timestamp: a consumer is told no event time for them).
type identity struct {
	name        string
	first, last uint64
	publish     uint64
}

func (id identity) key() []byte {
	b := append([]byte(nil), identityPrefix...)
	b = binary.AppendUvarint(b, id.first)
	b = binary.AppendUvarint(b, id.last)
	b = binary.AppendUvarint(b, id.publish)
	return append(b, id.name...)
}

// parseIdentity finds a stored record's identity among its keys.
func parseIdentity(r *broker.StoredRecord) (identity, bool) {
	if len(r.Keys) == 0 {
		return identity{}, false
	}
	var id identity
	found := false
	_ = r.EachKey(func(k broker.Key) {
		if found || !bytes.HasPrefix(k.Key, []byte(identityPrefix)) {
			return
		}
		b := k.Key[len(identityPrefix):]
		first, n := binary.Uvarint(b)
		if n <= 0 {
			return
		}
		last, m := binary.Uvarint(b[n:])
		if m <= 0 {
			return
		}
		publish, j := binary.Uvarint(b[n+m:])
		if j <= 0 {
			return
		}
		id, found = identity{name: string(b[n+m+j:]), first: first, last: last, publish: publish}, true
	})
	return id, found
}

// dedupWindow is how many offsets back from a queue's end its table is
// rebuilt from: the batches a reconnecting producer may resend are the
// newest.
const dedupWindow = 50_000

// dedup holds the tables of the queues Pulsar producers write.
type dedup struct {
	s      *Server
	mu     sync.Mutex
	queues map[model.QueueID]*queueSeqs
}

// queueSeqs is one queue's table; its lock orders a SEND's check and
// append against the others of the queue.
type queueSeqs struct {
	mu     sync.Mutex
	loaded bool
	last   map[string]int64
}

func newDedup(s *Server) *dedup { return &dedup{s: s, queues: map[model.QueueID]*queueSeqs{}} }

// lock returns queue q's table locked, loaded from the log if it is not.
func (d *dedup) lock(q model.QueueID) (*queueSeqs, error) {
	d.mu.Lock()
	qs := d.queues[q]
	if qs == nil {
		qs = &queueSeqs{last: map[string]int64{}}
		d.queues[q] = qs
	}
	d.mu.Unlock()
	qs.mu.Lock()
	if !qs.loaded {
		if err := d.load(q, qs); err != nil {
			qs.mu.Unlock()
			return nil, err
		}
		qs.loaded = true
	}
	return qs, nil
}

// load reads the identities of the queue's newest batches.
func (d *dedup) load(q model.QueueID, qs *queueSeqs) error {
	start, hw, err := d.s.b.QueueOffsets(q)
	if err != nil {
		return err
	}
	from := max(start, hw-dedupWindow)
	for from < hw {
		res, err := d.s.b.ReadQueue(q, from, broker.ReadOptions{MaxRecords: 4096, MaxBytes: 8 << 20})
		if err != nil {
			return err
		}
		for i := range res.Records {
			if id, ok := parseIdentity(&res.Records[i]); ok {
				qs.last[id.name] = max(qs.last[id.name], int64(id.last))
			}
		}
		next := res.NextOffset
		res.Release()
		if next <= from {
			break
		}
		from = next
	}
	return nil
}

// lastSequence is the highest sequence id producer name stored in q, or -1.
func (d *dedup) lastSequence(q model.QueueID, name string) (int64, error) {
	qs, err := d.lock(q)
	if err != nil {
		return -1, err
	}
	defer qs.mu.Unlock()
	if v, ok := qs.last[name]; ok {
		return v, nil
	}
	return -1, nil
}
