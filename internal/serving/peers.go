package serving

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/model"
)

// With several replication groups, a Kafka transaction spans groups: its
// coordinator (the leader of the group its transactional id hashes to)
// checks other groups' produces, takes consumer offsets committed at
// other groups' group coordinators, writes markers into other groups'
// partitions and commits offsets at the consumer group's coordinator.
// Each is a call to the member leading the group concerned (or a direct
// call when that is this member; member/peer). The admin API asks each
// group's leader the same way.

// CallErrors are the errors a call's answer carries by name, so the caller
// maps them to the same protocol codes as a local failure.
var CallErrors = []peer.NamedError{
	{Name: "not_in_transaction", Err: txn.ErrNotInTransaction},
	{Name: "invalid_producer_epoch", Err: txn.ErrInvalidProducerEpoch},
	{Name: "producer_fenced", Err: txn.ErrProducerFenced},
	{Name: "invalid_txn_state", Err: txn.ErrInvalidTxnState},
	{Name: "concurrent_transactions", Err: txn.ErrConcurrentTransactions},
	{Name: "unknown_transactional_id", Err: txn.ErrUnknownTransactionalID},
	{Name: "invalid_producer_id_mapping", Err: txn.ErrInvalidProducerIDMapping},
	{Name: "no_coordinator", Err: produce.ErrNoCoordinator},
	{Name: "move_busy", Err: broker.ErrMoveBusy},
	{Name: "move_refused", Err: broker.ErrMoveRefused},
	{Name: "queue_moved", Err: model.ErrQueueMoved},
	{Name: "not_leader", Err: model.ErrNotLeader},
	{Name: "offset_out_of_range", Err: model.ErrOffsetOutOfRange},
	{Name: "unknown_queue", Err: model.ErrUnknownQueue},
	{Name: "unknown_topic", Err: model.ErrUnknownTopic},
}

// callRequest is the body of every call about a group's broker (the
// fields its method uses).
type callRequest struct {
	Group         int                 `json:"g"`
	TxnID         string              `json:"t,omitempty"`
	ConsumerGroup string              `json:"c,omitempty"`
	PID           int64               `json:"p"`
	Epoch         int16               `json:"e"`
	Queue         model.QueueID       `json:"q,omitempty"`
	Commit        bool                `json:"k,omitempty"`
	Partitions    []txn.Partition     `json:"ps,omitempty"`
	Offsets       []txn.PendingOffset `json:"os,omitempty"`
	Node          model.NodeID        `json:"n,omitempty"`
}

// adminCall is an admin API request for one group's leader.
type adminCall struct {
	Group int              `json:"g"`
	Req   admin.SubRequest `json:"r"`
}

// none is the answer of calls that answer nothing but their error.
type none struct{}

// AnswerCalls registers this member's answers to the calls of others.
func (n *Node) AnswerCalls(p *peer.Peers) {
	for _, m := range []peer.Method{peer.Verify, peer.TxnOffsetCommit, peer.WriteMarkers, peer.CommitOffsets} {
		peer.Handle(p, m, func(ctx context.Context, _ model.NodeID, req callRequest) (none, error) {
			return none{}, n.answerGroup(ctx, m, req)
		})
	}
	peer.Handle(p, peer.Admin, n.answerAdmin)
	n.answerMoves(p)
	peer.Handle(p, peer.QueueHistory, n.answerHistory)
	n.answerQueues(p)
	p.HandleRaw(peer.KafkaForward, n.answerKafka)
}

// answerKafka answers a Kafka request a protocol-only node forwarded
// (kafka.Proxy) with this member's Kafka server.
func (n *Node) answerKafka(ctx context.Context, from model.NodeID, body []byte) ([]byte, error) {
	srv := n.kafkaServer.Load()
	if srv == nil {
		return nil, fmt.Errorf("%w: this member serves no Kafka listener", model.ErrNotLeader)
	}
	f, err := kafka.DecodeForwarded(body)
	if err != nil {
		return nil, err
	}
	ans, err := srv.ServeForwarded(ctx, int32(from), f)
	if err != nil {
		return nil, err
	}
	return kafka.AppendForwardAnswer(nil, ans), nil
}

// callGroup runs a call on the member leading group g: here when this
// member leads it, else over the transport.
func (n *Node) callGroup(ctx context.Context, g int, m peer.Method, req callRequest) error {
	req.Group = g
	_, err := peer.CallGroup[callRequest, none](ctx, n.Member.Peers(), g, m, req)
	return err
}

// answerGroup runs a call on this member's stack of the group it names.
func (n *Node) answerGroup(ctx context.Context, m peer.Method, req callRequest) error {
	st := n.Stack(req.Group)
	if st == nil {
		return fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, req.Group)
	}
	switch m {
	case peer.Verify:
		return st.Txns.Verify(req.PID, req.Epoch, req.Queue)
	case peer.TxnOffsetCommit:
		return st.Txns.CommitOffsets(ctx, req.TxnID, req.ConsumerGroup, req.PID, req.Epoch, req.Offsets)
	case peer.WriteMarkers:
		return st.Txns.WriteMarkers(ctx, req.Partitions, req.PID, req.Epoch, req.Commit)
	case peer.CommitOffsets:
		commits := make([]broker.OffsetCommit, len(req.Offsets))
		for i, o := range req.Offsets {
			commits[i] = broker.OffsetCommit{Queue: o.Queue, Offset: o.Offset, Metadata: o.Metadata, LeaderEpoch: o.LeaderEpoch}
		}
		return st.Broker.CommitQueueOffsets(ctx, req.ConsumerGroup, commits)
	}
	return fmt.Errorf("unknown call method %s", m)
}

// adminLeaderWait bounds how long an admin API request waits for a group
// between leaders: none elected yet, or one elected that is still
// building its broker from the log (tens of milliseconds).
const adminLeaderWait = 3 * time.Second

// askAdmin runs an admin API request on the handler of group g's leader:
// here when this member leads it, else over the transport. A request
// reaching a group between leaders waits for the next one (up to
// adminLeaderWait) instead of failing: a leadership move is not the
// user's error.
func (n *Node) askAdmin(ctx context.Context, g int, req admin.SubRequest) (admin.SubAnswer, error) {
	deadline := time.Now().Add(adminLeaderWait)
	for {
		a, err := n.askAdminOnce(ctx, g, req)
		if err == nil || !errors.Is(err, model.ErrNotLeader) || !time.Now().Before(deadline) {
			return a, err
		}
		select {
		case <-ctx.Done():
			return a, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// askAdminOnce is one try of askAdmin.
func (n *Node) askAdminOnce(ctx context.Context, g int, req admin.SubRequest) (admin.SubAnswer, error) {
	m := n.Member
	gs := n.groupServing(g)
	groups := m.Groups()
	if gs == nil || g >= len(groups) {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d", model.ErrNotLeader, g)
	}
	if h := gs.admin.Load(); h != nil {
		return admin.Answer(ctx, *h, req, "local"), nil
	}
	leader, _ := groups[g].Leader()
	if leader == 0 || leader == m.Self() {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d has no leader", model.ErrNotLeader, g)
	}
	return peer.Call[adminCall, admin.SubAnswer](ctx, m.Peers(), leader, peer.Admin, adminCall{Group: g, Req: req})
}

// answerAdmin answers another member's admin API request for a group
// this member leads.
func (n *Node) answerAdmin(ctx context.Context, from model.NodeID, c adminCall) (admin.SubAnswer, error) {
	gs := n.groupServing(c.Group)
	if gs == nil {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d", model.ErrNotLeader, c.Group)
	}
	h := gs.admin.Load()
	if h == nil {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group)
	}
	return admin.Answer(ctx, *h, c.Req, fmt.Sprintf("member-%d", from)), nil
}

// kafkaRemote is the Kafka front-end's reach into groups other members
// lead.
type kafkaRemote struct{ n *Node }

func (k kafkaRemote) Verify(ctx context.Context, group int, pid int64, epoch int16, queue model.QueueID) error {
	return k.n.callGroup(ctx, group, peer.Verify, callRequest{PID: pid, Epoch: epoch, Queue: queue})
}

func (k kafkaRemote) History(ctx context.Context, group int, r kafka.HistoryRead) (kafka.HistoryAnswer, error) {
	return peer.CallGroup[historyCall, kafka.HistoryAnswer](ctx, k.n.Member.Peers(), group, peer.QueueHistory, historyCall{Group: group, Read: r})
}

// historyCall asks group Group's leader for a moved queue's records there.
type historyCall struct {
	Group int               `json:"g"`
	Read  kafka.HistoryRead `json:"r"`
}

// answerHistory reads a moved queue's records in a group led here.
func (n *Node) answerHistory(_ context.Context, _ model.NodeID, c historyCall) (kafka.HistoryAnswer, error) {
	srv := n.kafkaServer.Load()
	if srv == nil {
		return kafka.HistoryAnswer{}, fmt.Errorf("%w: this member serves no Kafka listener", model.ErrNotLeader)
	}
	return srv.ReadHistory(c.Group, c.Read)
}

func (k kafkaRemote) TxnOffsetCommit(ctx context.Context, group int, txnID, consumerGroup string, pid int64, epoch int16, offsets []txn.PendingOffset) error {
	return k.n.callGroup(ctx, group, peer.TxnOffsetCommit, callRequest{TxnID: txnID, ConsumerGroup: consumerGroup, PID: pid, Epoch: epoch, Offsets: offsets})
}

// txnPeers is a transaction coordinator's reach into the other groups.
type txnPeers struct {
	n      *Node
	self   int
	groups int
	cat    *broker.Broker // the coordinator's catalog: where partitions live
}

// groupOf is the group holding a partition, as its topic's table says.
func (p txnPeers) groupOf(part txn.Partition) int {
	if t, err := p.cat.Topic(part.Topic); err == nil {
		return int(t.GroupOf(int(part.Index)))
	}
	return int(part.Index) % max(p.groups, 1) // a deleted topic: as topics were made before tables
}

func (p txnPeers) Remote(part txn.Partition) bool { return p.groupOf(part) != p.self }

func (p txnPeers) Sole() bool { return p.groups <= 1 && p.self == 0 }

func (p txnPeers) WriteMarkers(ctx context.Context, parts []txn.Partition, pid int64, epoch int16, commit bool) error {
	byGroup := map[int][]txn.Partition{}
	for _, part := range parts {
		g := p.groupOf(part)
		byGroup[g] = append(byGroup[g], part)
	}
	for g, ps := range byGroup {
		if err := p.n.callGroup(ctx, g, peer.WriteMarkers, callRequest{PID: pid, Epoch: epoch, Commit: commit, Partitions: ps}); err != nil {
			return err
		}
	}
	return nil
}

func (p txnPeers) CommitOffsets(ctx context.Context, group string, offsets []txn.PendingOffset) error {
	g := broker.KeyPartition(group, p.groups)
	return p.n.callGroup(ctx, g, peer.CommitOffsets, callRequest{ConsumerGroup: group, Offsets: offsets})
}
