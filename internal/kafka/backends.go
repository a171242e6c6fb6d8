package kafka

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/producers"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
)

// Backend is one replication group's broker stack as the front-end serves
// it: the group's broker (its share of every topic's queues), its consumer
// group coordinator, producer state and transaction coordinator. A single
// node has one, group 0, holding every queue; a cluster member has one for
// each group it leads, attached while it leads it.
type Backend struct {
	Broker *broker.Broker
	Groups *groups.Coordinator
	// Producers holds idempotent-producer state; nil: in memory only.
	Producers *producers.Manager
	// Transactions is the group's transaction coordinator; nil:
	// transactional requests get COORDINATOR_NOT_AVAILABLE.
	Transactions *txn.Coordinator
	// Pop is the group's POP engine, which holds share groups' record
	// acquisitions; nil: share fetches get UNSUPPORTED_VERSION.
	Pop *pop.Engine
}

// backend is an attached Backend with what the front-end builds over it.
type backend struct {
	group     int
	broker    *broker.Broker
	groups    *groups.Coordinator
	producers *producers.Manager
	txns      *txn.Coordinator
	txnIndex  *producers.TxnIndex
	produce   *produce.Appender
	pop       *pop.Engine
}

// backendSet is the backends of every group, nil where this node does not
// lead the group.
type backendSet []*backend

// backends holds the current set; swapped whole on attach and detach.
type backends struct {
	cur atomic.Pointer[backendSet]
	// last is the catalog of the most recently attached backend, kept for
	// requests that arrive while none is attached (they fail on its
	// closed engine rather than on a nil broker).
	last atomic.Pointer[broker.Broker]
}

// Attach serves a group's stack: its partitions and the coordinators whose
// keys hash to it are answered by it from now on.
func (s *Server) Attach(group int, be Backend) {
	if group < 0 {
		panic(fmt.Sprintf("kafka: attach group %d", group))
	}
	b := &backend{group: group, broker: be.Broker, groups: be.Groups, producers: be.Producers, txns: be.Transactions,
		txnIndex: be.Broker.KafkaTxns(), pop: be.Pop}
	if b.producers == nil {
		b.producers = producers.New(be.Broker.Meta(), producers.Options{Logger: s.opts.Logger})
	}
	b.produce = produce.New(be.Broker, b.producers, b.txnIndex, verifier{s}, s.batches)
	if s.opts.Tracer.Enabled() {
		b.produce.FindTraceParents()
	}
	s.be.last.Store(be.Broker)
	s.swapBackend(group, b)
}

// Detach stops serving a group: its partitions answer NOT_LEADER_OR_FOLLOWER
// and its coordinators NOT_COORDINATOR, so clients look up the new leader.
func (s *Server) Detach(group int) {
	if group >= 0 {
		s.swapBackend(group, nil)
	}
}

// Serving reports whether any group is attached.
func (s *Server) Serving() bool {
	set := s.be.cur.Load()
	for _, b := range *set {
		if b != nil {
			return true
		}
	}
	return false
}

func (s *Server) swapBackend(group int, b *backend) {
	for {
		old := s.be.cur.Load()
		next := append(backendSet(nil), *old...)
		for len(next) <= group { // a group added while the node runs
			next = append(next, nil)
		}
		next[group] = b
		if s.be.cur.CompareAndSwap(old, &next) {
			return
		}
	}
}

// groupCount is the number of replication groups coordinators spread over
// (the groups the cluster was made with).
func (s *Server) groupCount() int { return max(s.opts.Groups, 1) }

// knownGroups is how many replication groups this node knows: those it
// was made with, any it attached since and those its cluster view names.
func (s *Server) knownGroups() int {
	n := max(s.groupCount(), len(*s.be.cur.Load()))
	if v := s.clusterView(); v != nil {
		n = max(n, len(v.Groups))
	}
	return n
}

// any returns an attached backend, group 0's when attached; nil when none.
func (s *Server) any() *backend {
	for _, b := range *s.be.cur.Load() {
		if b != nil {
			return b
		}
	}
	return nil
}

// cat is the broker whose catalog (topics, configs, metadata) requests
// read and change: every group's broker sees every topic.
func (s *Server) cat() *broker.Broker {
	if b := s.any(); b != nil {
		return b.broker
	}
	return s.be.last.Load()
}

// part is one partition as the backend of its group serves it.
type part struct {
	be    *backend
	topic *broker.Topic // the backend's view of the topic
	index int32         // the partition's index among the backend's queues
	queue model.QueueID
}

// partition finds the backend serving partition p of t (t from any
// backend's catalog): its group's, as the topic's table says. A group this
// node does not lead is a *model.NotLeaderError naming its leader (KIP-951).
func (s *Server) partition(t *broker.Topic, p int32) (part, error) {
	if p < 0 || int(p) >= len(t.All) {
		return part{}, fmt.Errorf("%w: %s partition %d of %d", model.ErrUnknownQueue, t.Name, p, len(t.All))
	}
	g := int(t.GroupOf(int(p)))
	set := *s.be.cur.Load()
	if g >= len(set) {
		return part{}, fmt.Errorf("%w: %s partition %d is in group %d, not yet known here", model.ErrNotLeader, t.Name, p, g)
	}
	be := set[g]
	if be == nil {
		leader, epoch := s.groupLeader(int(g))
		if epoch >= 0 {
			epoch += int32(t.EpochBase(int(p)))
		}
		return part{}, &model.NotLeaderError{Queue: t.All[p], Leader: model.NodeID(leader), Epoch: model.Epoch(epoch)}
	}
	if len(set) == 1 && len(t.Queues) == len(t.All) {
		return part{be: be, topic: t, index: p, queue: t.All[p]}, nil
	}
	// The catalog knows the partition but the group's broker may not yet:
	// a new term's broker starts from its member's local metadata and
	// catches up by its watch. Retriable as a moving leader is (clients
	// give up after a few UNKNOWN_TOPIC_OR_PARTITION answers).
	idx := int32(t.LocalIndex(int(p)))
	bt, err := be.broker.Topic(t.Name)
	if err == nil {
		if q, ok := bt.Queue(idx); !ok || q != t.All[p] {
			err = model.ErrUnknownQueue
		}
	}
	if err != nil {
		return part{}, fmt.Errorf("%w: %s partition %d not yet known to group %d", model.ErrNotLeader, t.Name, p, g)
	}
	return part{be: be, topic: bt, index: idx, queue: t.All[p]}, nil
}

// partitionOf is partition for a topic named by name.
func (s *Server) partitionOf(name model.TopicName, p int32) (part, error) {
	t, err := s.cat().Topic(name)
	if err != nil {
		return part{}, err
	}
	return s.partition(t, p)
}

// errNotCoordinator answers a coordinator request this node does not
// serve: the client finds the coordinator again.
var errNotCoordinator = &kafkaCodeError{code: kerr.NotCoordinator.Code, msg: "not the coordinator of this key"}

// coordinatorGroup is the replication group whose leader coordinates key (a
// consumer group or transactional id): Kafka's hash of the key.
func (s *Server) coordinatorGroup(key string) int {
	return broker.KeyPartition(key, s.groupCount())
}

// coordinator returns the backend coordinating key, or errNotCoordinator.
func (s *Server) coordinator(key string) (*backend, error) {
	if be := (*s.be.cur.Load())[s.coordinatorGroup(key)]; be != nil {
		return be, nil
	}
	return nil, errNotCoordinator
}

// attached lists the attached backends.
func (s *Server) attached() []*backend {
	var out []*backend
	for _, b := range *s.be.cur.Load() {
		if b != nil {
			out = append(out, b)
		}
	}
	return out
}

// Remote reaches the coordinators of groups other cluster members lead.
type Remote interface {
	// Verify checks a transactional batch with the transaction
	// coordinator of group: producer pid at epoch has queue in its open
	// transaction.
	Verify(ctx context.Context, group int, pid int64, epoch int16, queue model.QueueID) error
	// TxnOffsetCommit hands a transaction's consumer offsets to the
	// transaction coordinator of group.
	TxnOffsetCommit(ctx context.Context, group int, txnID, consumerGroup string, pid int64, epoch int16, offsets []txn.PendingOffset) error
	// History reads a moved queue's records in a group it was in before
	// (Server.ReadHistory at that group's leader).
	History(ctx context.Context, group int, r HistoryRead) (HistoryAnswer, error)
}

// verifier checks transactional batches with the coordinator of their
// transactional id, here or on the member leading its group.
type verifier struct{ s *Server }

func (v verifier) Verify(ctx context.Context, txnID string, pid int64, epoch int16, queue model.QueueID) error {
	g := v.s.coordinatorGroup(txnID)
	if be := (*v.s.be.cur.Load())[g]; be != nil {
		if be.txns == nil {
			return produce.ErrNoCoordinator
		}
		return be.txns.Verify(pid, epoch, queue)
	}
	if v.s.opts.Remote == nil {
		return produce.ErrNoCoordinator
	}
	return v.s.opts.Remote.Verify(ctx, g, pid, epoch, queue)
}

// txnCoordinator returns the transaction coordinator of a transactional
// id when this node serves it.
func (s *Server) txnCoordinator(id string) (*txn.Coordinator, error) {
	be, err := s.coordinator(id)
	if err != nil {
		return nil, err
	}
	if be.txns == nil {
		return nil, errNoTxnCoordinator
	}
	return be.txns, nil
}

// pendingTxnOffsets says whether an open transaction coordinated here holds
// an uncommitted offset of group for queue.
func (s *Server) pendingTxnOffsets(group string, queue model.QueueID) bool {
	for _, be := range s.attached() {
		if be.txns != nil && be.txns.HasPendingOffsets(group, queue) {
			return true
		}
	}
	return false
}

// errNoBackend is a request that needs a broker while this node serves no
// group (it stepped down): retriable, the client asks another node.
var errNoBackend = &kafkaCodeError{code: kerr.CoordinatorNotAvailable.Code, msg: "this node serves no replication group"}
