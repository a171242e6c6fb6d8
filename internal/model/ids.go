package model

import "fmt"

// NodeID identifies a broker process in a cluster. A single node is node 1.
type NodeID int32

// ClusterID is the persisted, random identity of a cluster.
type ClusterID string

// GroupID identifies a replication group: one commit log shared by many
// queues. A single node has exactly group 0.
type GroupID uint16

// QueueID is the storage-level identity of one queue (a Kafka partition or a
// RocketMQ queue). It is allocated once by the broker and never reused.
type QueueID uint32

// QueueOffset is the dense, gap-free logical offset of a message in its queue.
type QueueOffset int64

// LogPos is a physical byte position in a group's commit log. It is never a
// queue offset.
type LogPos int64

// LocalPosBase is the first position of a node's local area: records at
// LocalPosBase and above (garbage-collection copies) live outside the
// replicated log and take no record index. Positions below it are in the
// commit log proper.
const LocalPosBase LogPos = 1 << 62

// IsLocal reports whether p lies in the local area.
func (p LogPos) IsLocal() bool { return p >= LocalPosBase }

// Index is the dense sequence number of a record in a commit log (the Raft
// index in cluster mode).
type Index uint64

// Term is the leadership term a record was written in. It is constant (1) on a
// single node.
type Term uint64

// ProducerID identifies an idempotent or transactional producer.
type ProducerID int64

// Epoch is a producer or leader epoch.
type Epoch int32

// PayloadFormat says how a stored payload is encoded. Storage never looks
// inside a payload; front-ends use the format to decide whether stored bytes
// can be returned as they are or must be converted.
type PayloadFormat uint8

// Payload formats known to Rosetta.
const (
	FormatMessage      PayloadFormat = 0 // one message in Rosetta's neutral encoding
	FormatKafkaBatchV2 PayloadFormat = 1 // a Kafka record batch, magic 2
	FormatRocketMQ     PayloadFormat = 2 // a RocketMQ message in its stored layout
	FormatInternal     PayloadFormat = 3 // broker state records (offsets, …)
)

func (f PayloadFormat) String() string {
	switch f {
	case FormatMessage:
		return "message"
	case FormatKafkaBatchV2:
		return "kafka-v2"
	case FormatRocketMQ:
		return "rocketmq"
	case FormatInternal:
		return "internal"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// LeaderEpoch is the Kafka leader epoch of records written in term t: the
// term less one, so a single node's term 1 is epoch 0. Term 0 (unknown) is
// epoch -1.
func (t Term) LeaderEpoch() Epoch {
	if t == 0 {
		return -1
	}
	return Epoch(t - 1)
}
