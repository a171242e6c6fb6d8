package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/produce"
	"github.com/rosettamq/rosetta/internal/broker/txn"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
)

// With several replication groups, a Kafka transaction spans groups: its
// coordinator (the leader of the group its transactional id hashes to)
// checks other groups' produces, takes consumer offsets committed at
// other groups' group coordinators, writes markers into other groups'
// partitions and commits offsets at the consumer group's coordinator.
// Each is a call to the member leading the group concerned (or a direct
// call when that is this member), over the replication transport.

// Call methods between members.
const (
	callVerify          byte = 1 // txn coordinator: is a partition in an open transaction
	callTxnOffsetCommit byte = 2 // txn coordinator: offsets pending in a transaction
	callWriteMarkers    byte = 3 // partition leader: a decided transaction's markers
	callCommitOffsets   byte = 4 // group coordinator: a committed transaction's offsets
	callAdmin           byte = 5 // group leader: an admin API request for its group
	callElect           byte = 9 // group leader: hand the group to a member (a preferred leader election)
)

// callTimeout bounds one call to another member.
const callTimeout = 5 * time.Second

// callRequest is every call's body (the fields its method uses).
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

// callErrors are the errors a call's answer carries by name, so the caller
// maps them to the same protocol codes as a local failure.
var callErrors = []struct {
	name string
	err  error
}{
	{"not_in_transaction", txn.ErrNotInTransaction},
	{"invalid_producer_epoch", txn.ErrInvalidProducerEpoch},
	{"producer_fenced", txn.ErrProducerFenced},
	{"invalid_txn_state", txn.ErrInvalidTxnState},
	{"concurrent_transactions", txn.ErrConcurrentTransactions},
	{"unknown_transactional_id", txn.ErrUnknownTransactionalID},
	{"invalid_producer_id_mapping", txn.ErrInvalidProducerIDMapping},
	{"no_coordinator", produce.ErrNoCoordinator},
	{"not_leader", model.ErrNotLeader},
	{"unknown_queue", model.ErrUnknownQueue},
	{"unknown_topic", model.ErrUnknownTopic},
}

// nameCallError names a handler's error for its answer.
func nameCallError(err error) error {
	for _, ce := range callErrors {
		if errors.Is(err, ce.err) {
			return fmt.Errorf("%s|%v", ce.name, err)
		}
	}
	return err
}

// callError maps a call's failure back to the error it names; a member
// that cannot be reached, or that no longer leads the group, is
// model.ErrNotLeader (retriable: the group's leader is being found).
func callError(err error) error {
	var ce *replication.CallError
	if errors.As(err, &ce) {
		name, msg, ok := strings.Cut(ce.Msg, "|")
		if ok {
			for _, k := range callErrors {
				if k.name == name {
					return fmt.Errorf("%w (%s)", k.err, msg)
				}
			}
		}
		return errors.New(ce.Msg)
	}
	return fmt.Errorf("%w: %w", model.ErrNotLeader, err)
}

// callGroup runs a call on the member leading group g: here when this
// member leads it, else over the transport.
func (a *App) callGroup(ctx context.Context, g int, method byte, req callRequest) error {
	r := a.replica
	if g < 0 || g >= len(r.groups) {
		return fmt.Errorf("%w: group %d", model.ErrNotLeader, g)
	}
	req.Group = g
	leader, _ := r.groups[g].leader()
	switch leader {
	case 0:
		return fmt.Errorf("%w: group %d has no leader", model.ErrNotLeader, g)
	case r.self:
		return a.answerLocal(ctx, method, req)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := r.transport.Call(ctx, leader, method, body); err != nil {
		return callError(err)
	}
	return nil
}

// adminCall is an admin API request for one group's leader.
type adminCall struct {
	Group int              `json:"g"`
	Req   admin.SubRequest `json:"r"`
}

// askAdmin runs an admin API request on the handler of group g's leader:
// here when this member leads it, else over the transport.
func (a *App) askAdmin(ctx context.Context, g int, req admin.SubRequest) (admin.SubAnswer, error) {
	r := a.replica
	if g < 0 || g >= len(r.groups) {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d", model.ErrNotLeader, g)
	}
	if h := r.groups[g].admin.Load(); h != nil {
		return admin.Answer(ctx, *h, req, "local"), nil
	}
	leader, _ := r.groups[g].leader()
	if leader == 0 || leader == r.self {
		return admin.SubAnswer{}, fmt.Errorf("%w: group %d has no leader", model.ErrNotLeader, g)
	}
	body, err := json.Marshal(adminCall{Group: g, Req: req})
	if err != nil {
		return admin.SubAnswer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	out, err := r.transport.Call(ctx, leader, callAdmin, body)
	if err != nil {
		return admin.SubAnswer{}, callError(err)
	}
	var ans admin.SubAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		return admin.SubAnswer{}, fmt.Errorf("group %d's answer: %w", g, err)
	}
	return ans, nil
}

// answerAdmin answers another member's admin API request for a group
// this member leads.
func (a *App) answerAdmin(ctx context.Context, from model.NodeID, body []byte) ([]byte, error) {
	var c adminCall
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("call from member %d: %w", from, err)
	}
	r := a.replica
	if c.Group < 0 || c.Group >= len(r.groups) {
		return nil, nameCallError(fmt.Errorf("%w: group %d", model.ErrNotLeader, c.Group))
	}
	h := r.groups[c.Group].admin.Load()
	if h == nil {
		return nil, nameCallError(fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group))
	}
	return json.Marshal(admin.Answer(ctx, *h, c.Req, fmt.Sprintf("member-%d", from)))
}

// answerCall answers another member's call.
func (a *App) answerCall(ctx context.Context, from model.NodeID, method byte, body []byte) ([]byte, error) {
	switch method {
	case callAdmin:
		return a.answerAdmin(ctx, from, body)
	case callImageOpen, callImageRead, callImageClose:
		return a.answerImage(ctx, from, method, body)
	}
	var req callRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("call from member %d: %w", from, err)
	}
	if err := a.answerLocal(ctx, method, req); err != nil {
		return nil, nameCallError(err)
	}
	return nil, nil
}

// answerLocal runs a call on this member's stack of the group it names.
func (a *App) answerLocal(ctx context.Context, method byte, req callRequest) error {
	r := a.replica
	if req.Group < 0 || req.Group >= len(r.groups) {
		return fmt.Errorf("%w: group %d", model.ErrNotLeader, req.Group)
	}
	st := r.groups[req.Group].stack.Load()
	if st == nil {
		return fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, req.Group)
	}
	switch method {
	case callVerify:
		return st.txns.Verify(req.PID, req.Epoch, req.Queue)
	case callTxnOffsetCommit:
		return st.txns.CommitOffsets(ctx, req.TxnID, req.ConsumerGroup, req.PID, req.Epoch, req.Offsets)
	case callWriteMarkers:
		return st.txns.WriteMarkers(ctx, req.Partitions, req.PID, req.Epoch, req.Commit)
	case callElect:
		lr := r.groups[req.Group].hosted()
		if lr == nil {
			return fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, req.Group)
		}
		if err := lr.raft.TransferLeadership(ctx, req.Node); err != nil {
			return err
		}
		a.log.Info("leadership moved by a preferred leader election", "group", req.Group, "to", req.Node)
		return nil
	case callCommitOffsets:
		commits := make([]broker.OffsetCommit, len(req.Offsets))
		for i, o := range req.Offsets {
			commits[i] = broker.OffsetCommit{Queue: o.Queue, Offset: o.Offset, Metadata: o.Metadata, LeaderEpoch: o.LeaderEpoch}
		}
		return st.broker.CommitQueueOffsets(ctx, req.ConsumerGroup, commits)
	}
	return fmt.Errorf("unknown call method %d", method)
}

// kafkaRemote is the Kafka front-end's reach into groups other members
// lead.
type kafkaRemote struct{ a *App }

func (k kafkaRemote) Verify(ctx context.Context, group int, pid int64, epoch int16, queue model.QueueID) error {
	return k.a.callGroup(ctx, group, callVerify, callRequest{PID: pid, Epoch: epoch, Queue: queue})
}

func (k kafkaRemote) TxnOffsetCommit(ctx context.Context, group int, txnID, consumerGroup string, pid int64, epoch int16, offsets []txn.PendingOffset) error {
	return k.a.callGroup(ctx, group, callTxnOffsetCommit, callRequest{TxnID: txnID, ConsumerGroup: consumerGroup, PID: pid, Epoch: epoch, Offsets: offsets})
}

// txnPeers is a transaction coordinator's reach into the other groups.
type txnPeers struct {
	a      *App
	self   int
	groups int
}

func (p txnPeers) Remote(part txn.Partition) bool { return int(part.Index)%p.groups != p.self }

func (p txnPeers) WriteMarkers(ctx context.Context, parts []txn.Partition, pid int64, epoch int16, commit bool) error {
	byGroup := map[int][]txn.Partition{}
	for _, part := range parts {
		g := int(part.Index) % p.groups
		byGroup[g] = append(byGroup[g], part)
	}
	for g, ps := range byGroup {
		if err := p.a.callGroup(ctx, g, callWriteMarkers, callRequest{PID: pid, Epoch: epoch, Commit: commit, Partitions: ps}); err != nil {
			return err
		}
	}
	return nil
}

func (p txnPeers) CommitOffsets(ctx context.Context, group string, offsets []txn.PendingOffset) error {
	g := broker.KeyPartition(group, p.groups)
	return p.a.callGroup(ctx, g, callCommitOffsets, callRequest{ConsumerGroup: group, Offsets: offsets})
}
