package broker

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"

	"github.com/rosettamq/rosetta/internal/model"
)

// Records of the consumer offsets queues (little endian), payload byte 0
// the operation:
//
//	commit (1, read only: written before epochs were kept), commit with
//	epochs (4), delete offsets (3), delete group (2):
//	  op | group len u16 | group | time i64 | n u32 |
//	  n × { queue u32 | offset i64 | metadata len u16 | metadata | epoch i32 (op 4 only) }
//
// Snapshots of a queue's groups are the StateLog's (statelog.go).
const (
	opCommit        = 1
	opDeleteGroup   = 2
	opDeleteOffsets = 3
	// opCommitEpochs is opCommit whose commits carry their leader epoch;
	// the only commit op written now.
	opCommitEpochs = 4
)

// offsetsPartitions is the number of consumer offsets queues. A group's
// records go to the queue KeyPartition picks, as Kafka spreads groups
// over its 50 __consumer_offsets partitions; a cluster places each queue's
// coordinator with its replication group.
const offsetsPartitions = 50

// KeyPartition is Kafka's coordinator partition for a group or
// transactional id: abs(Java String.hashCode(key)) mod the partition count.
func KeyPartition(group string, n int) int {
	var h int32
	for _, u := range utf16.Encode([]rune(group)) {
		h = 31*h + int32(u)
	}
	if h == -1<<31 {
		return 0
	}
	if h < 0 {
		h = -h
	}
	return int(h) % n
}

func encodeOffsetRecord(op byte, group string, commits []OffsetCommit, now int64) []byte {
	le := binary.LittleEndian
	b := []byte{op}
	b = le.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	b = le.AppendUint64(b, uint64(now))
	b = le.AppendUint32(b, uint32(len(commits)))
	for _, c := range commits {
		b = le.AppendUint32(b, uint32(c.Queue))
		b = le.AppendUint64(b, uint64(c.Offset))
		b = le.AppendUint16(b, uint16(len(c.Metadata)))
		b = append(b, c.Metadata...)
		if op == opCommitEpochs {
			b = le.AppendUint32(b, uint32(c.LeaderEpoch))
		}
	}
	return b
}

// decodeOffsetRecord parses a record of the offsets queue.
func decodeOffsetRecord(b []byte) (op byte, group string, commits []OffsetCommit, now int64, err error) {
	r := &msgReader{b: b}
	if v := r.take(1); v != nil {
		op = v[0]
	}
	group = string(r.take(r.u16()))
	if t := r.take(8); t != nil {
		now = int64(binary.LittleEndian.Uint64(t))
	}
	n := int(r.u32())
	if n > len(b) {
		return 0, "", nil, 0, fmt.Errorf("%w: %d commits in %d bytes", model.ErrCorruptRecord, n, len(b))
	}
	for i := 0; i < n && r.err == nil; i++ {
		var c OffsetCommit
		c.Queue = model.QueueID(r.u32())
		if v := r.take(8); v != nil {
			c.Offset = model.QueueOffset(binary.LittleEndian.Uint64(v))
		}
		c.Metadata = string(r.take(r.u16()))
		c.LeaderEpoch = -1
		if op == opCommitEpochs {
			c.LeaderEpoch = model.Epoch(r.u32())
		}
		commits = append(commits, c)
	}
	if op == opCommitEpochs {
		op = opCommit
	} else if r.err == nil && (op != opCommit && op != opDeleteGroup && op != opDeleteOffsets) {
		r.err = fmt.Errorf("%w: offset record op %d", model.ErrCorruptRecord, op)
	}
	return op, group, commits, now, r.err
}

// encodeGroupSnapshot lays out: n u32 | n × { queue u32 | offset i64 |
// commit time i64 | metadata len u16 | metadata } | n × leader epoch i32
// (the epochs follow the entries, in their order, so snapshots written
// before epochs were kept still decode, with epochs -1).
func encodeGroupSnapshot(g map[model.QueueID]Committed) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, uint32(len(g)))
	epochs := make([]model.Epoch, 0, len(g))
	for q, c := range g {
		b = le.AppendUint32(b, uint32(q))
		b = le.AppendUint64(b, uint64(c.Offset))
		b = le.AppendUint64(b, uint64(c.CommitTime))
		b = le.AppendUint16(b, uint16(len(c.Metadata)))
		b = append(b, c.Metadata...)
		epochs = append(epochs, c.LeaderEpoch)
	}
	for _, ep := range epochs {
		b = le.AppendUint32(b, uint32(ep))
	}
	return b
}

func decodeGroupSnapshot(b []byte) (map[model.QueueID]Committed, error) {
	r := &msgReader{b: b}
	n := int(r.u32())
	if n > len(b) {
		return nil, fmt.Errorf("%w: %d offsets in %d bytes", model.ErrCorruptRecord, n, len(b))
	}
	g := make(map[model.QueueID]Committed, n)
	order := make([]model.QueueID, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		q := model.QueueID(r.u32())
		var c Committed
		if v := r.take(8); v != nil {
			c.Offset = model.QueueOffset(binary.LittleEndian.Uint64(v))
		}
		if v := r.take(8); v != nil {
			c.CommitTime = int64(binary.LittleEndian.Uint64(v))
		}
		c.Metadata = string(r.take(r.u16()))
		c.LeaderEpoch = -1
		g[q] = c
		order = append(order, q)
	}
	if r.err == nil && len(r.b) == 4*len(order) {
		for _, q := range order {
			c := g[q]
			c.LeaderEpoch = model.Epoch(r.u32())
			g[q] = c
		}
	}
	return g, r.err
}
