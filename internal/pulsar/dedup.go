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

// identity is a stored batch's producer, sequence ids, publish time and
// the messages that came without an event time (bit i of noEvent: their
// records carry the publish time as timestamp, and consumers are told no
// event time).
type identity struct {
	name        string
	first, last uint64
	publish     uint64
	noEvent     []byte
}

func (id identity) key() []byte {
	b := append([]byte(nil), identityPrefix...)
	b = binary.AppendUvarint(b, id.first)
	b = binary.AppendUvarint(b, id.last)
	b = binary.AppendUvarint(b, id.publish)
	b = binary.AppendUvarint(b, uint64(len(id.noEvent)))
	b = append(b, id.noEvent...)
	return append(b, id.name...)
}

// hasEventTime says whether message i of the batch came with an event time.
func (id identity) hasEventTime(i int) bool {
	return i < 0 || i/8 >= len(id.noEvent) || id.noEvent[i/8]&(1<<(i%8)) == 0
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
		b = b[n+m:]
		publish, j := binary.Uvarint(b)
		if j <= 0 {
			return
		}
		b = b[j:]
		size, j := binary.Uvarint(b)
		if j <= 0 || size > uint64(len(b)-j) {
			return
		}
		mask := b[j : j+int(size)]
		id, found = identity{name: string(b[j+int(size):]), first: first, last: last, publish: publish, noEvent: mask}, true
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
