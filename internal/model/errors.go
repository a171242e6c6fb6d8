package model

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by every layer. The core wraps them with %w; each
// front-end maps them to protocol codes in exactly one place with errors.Is.
var (
	ErrUnknownTopic       = errors.New("unknown topic")
	ErrTopicExists        = errors.New("topic already exists")
	ErrInvalidTopic       = errors.New("invalid topic name")
	ErrUnknownQueue       = errors.New("unknown queue")
	ErrInvalidQueueCount  = errors.New("invalid queue count")
	ErrOffsetOutOfRange   = errors.New("offset out of range")
	ErrMessageTooLarge    = errors.New("message too large")
	ErrCorruptRecord      = errors.New("corrupt record")
	ErrDiskFull           = errors.New("disk usage limit reached: writes refused")
	ErrClosed             = errors.New("closed")
	ErrInvalidConfig      = errors.New("invalid configuration")
	ErrUnsupportedVersion = errors.New("unsupported format version")
	ErrNotFound           = errors.New("not found")
	// ErrTierUnavailable: a record lives only in the object store, which
	// cannot serve it now (retriable).
	ErrTierUnavailable = errors.New("tiered storage unavailable")
	// ErrInvalidReplicationFactor: a factor the cluster cannot place (an
	// ErrInvalidConfig).
	ErrInvalidReplicationFactor = fmt.Errorf("%w: replication factor", ErrInvalidConfig)
)

// ErrNotLeader is a request for a queue this node does not lead; a
// *NotLeaderError says who does.
var ErrNotLeader = errors.New("not the leader of the queue")

// ErrQueueMoved is an append to a queue that is moving, or moved, to
// another replication group: an ErrNotLeader, so clients look its leader
// up again and retry there.
var ErrQueueMoved = fmt.Errorf("%w: the queue is moving to another group", ErrNotLeader)

// NotLeaderError is ErrNotLeader with what this node knows of the leader:
// Leader is -1 when unknown (an election is under way), Epoch its leader
// epoch.
type NotLeaderError struct {
	Queue  QueueID
	Leader NodeID
	Epoch  Epoch
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("%v %d (leader: node %d, epoch %d)", ErrNotLeader, e.Queue, e.Leader, e.Epoch)
}

// Is makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }
