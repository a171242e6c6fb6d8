package admin

import (
	"fmt"
	"net/http"
	"slices"
	"sort"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// Consumer groups as their committed offsets show them: every group that
// commits — Kafka classic and KIP-848 groups, RocketMQ push and pull
// consumers — whatever protocol it speaks.

// groupDetail is a group's committed offsets as this broker holds them:
// those of its own queues, and a Kafka coordinator's of other replication
// groups' queues too (their End is -1: this broker does not know it).
func groupDetail(b *broker.Broker, refs map[model.QueueID]queueRef, group string) apiv1.GroupDetail {
	d := apiv1.GroupDetail{Name: group, Offsets: []apiv1.GroupOffset{}, Members: []apiv1.GroupMember{}, LagHistory: []apiv1.LagPoint{}}
	for id, c := range b.GroupQueueOffsets(group) {
		ref, ok := refs[id]
		if !ok {
			continue
		}
		o := apiv1.GroupOffset{Topic: ref.topic.Name.Short(), Queue: ref.queue, Committed: int64(c.Offset), Metadata: c.Metadata,
			CommitTimeMs: c.CommitTime, End: -1}
		if local, held, _ := localQueue(b, ref.topic, int64(ref.queue)); held {
			if _, hw, _, err := b.Offsets(ref.topic.Name, local); err == nil {
				o.End = int64(hw)
				o.Lag = max(0, o.End-o.Committed)
			}
		}
		d.Lag += o.Lag
		d.Offsets = append(d.Offsets, o)
	}
	sortOffsets(d.Offsets)
	return d
}

func sortOffsets(offs []apiv1.GroupOffset) {
	sort.Slice(offs, func(i, j int) bool {
		a, b := offs[i], offs[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Queue < b.Queue
	})
}

// knownGroups lists the groups with committed offsets or live members.
func knownGroups(b *broker.Broker, members *Members) []string {
	all := append(b.OffsetGroups(), members.groups()...)
	slices.Sort(all)
	return slices.Compact(all)
}

func registerGroupAPI(mux *http.ServeMux, b *broker.Broker, sec Security, members *Members, hist *History) {
	mux.HandleFunc("GET /api/v1/groups", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		out := []apiv1.GroupSummary{}
		refs := queueRefs(b)
		if r.URL.Query().Get("details") == "true" {
			// Every group's detail (what the cluster-wide API merges).
			all := []apiv1.GroupDetail{}
			for _, g := range knownGroups(b, members) {
				d := groupDetail(b, refs, g)
				members.describe(b, &d)
				all = append(all, d)
			}
			writeJSON(w, all)
			return
		}
		for _, g := range knownGroups(b, members) {
			d := groupDetail(b, refs, g)
			members.describe(b, &d)
			topics := map[string]bool{}
			for _, o := range d.Offsets {
				topics[o.Topic] = true
			}
			rate, stuck := hist.GroupRate(g)
			out = append(out, apiv1.GroupSummary{Name: g, Topics: len(topics), Lag: d.Lag, Members: len(d.Members), State: d.State,
				ConsumedPerSec: rate, Stuck: stuck})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		writeJSON(w, out)
	}))
	mux.HandleFunc("GET /api/v1/groups/{group}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		group := r.PathValue("group")
		if !slices.Contains(knownGroups(b, members), group) {
			apiError(w, http.StatusNotFound, "group_not_found", "no committed offsets or live members for group "+group)
			return
		}
		d := groupDetail(b, queueRefs(b), group)
		members.describe(b, &d)
		d.LagHistory = hist.LagHistory(group)
		writeJSON(w, d)
	}))
	// Reset a group's committed offsets. As with kafka-consumer-groups,
	// stop the group's consumers first: a running member commits its own
	// position over the reset.
	mux.HandleFunc("POST /api/v1/groups/{group}/reset", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		var req apiv1.OffsetReset
		if !readJSON(w, r, &req) {
			return
		}
		moves, err := resetOffsets(r, b, r.PathValue("group"), req)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, moves)
	}))
	// Record offsets a reset over several replication groups computed
	// (the cluster's admin API asks every group's leader).
	mux.HandleFunc("POST /api/v1/groups/{group}/offsets", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		var moves []apiv1.OffsetMove
		if !readJSON(w, r, &moves) {
			return
		}
		if err := commitMoves(r, b, r.PathValue("group"), moves); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	// Delete a group as Kafka's DeleteGroups does: its committed offsets
	// and the coordinator's state of it, refused while it has members.
	mux.HandleFunc("DELETE /api/v1/groups/{group}", sec.guard(func(w http.ResponseWriter, r *http.Request) {
		group := r.PathValue("group")
		if !slices.Contains(knownGroups(b, members), group) {
			apiError(w, http.StatusNotFound, "group_not_found", "no committed offsets or live members for group "+group)
			return
		}
		if err := members.deleteKafka(group); err != nil {
			apiError(w, http.StatusConflict, "group_not_empty", "group "+group+" has live members: stop them first")
			return
		}
		if err := b.DeleteGroupOffsets(r.Context(), group); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

// resetOffsets moves a group's committed offsets as req says (and only
// reports the moves on a dry run).
func resetOffsets(r *http.Request, b *broker.Broker, group string, req apiv1.OffsetReset) ([]apiv1.OffsetMove, error) {
	switch req.To {
	case "earliest", "latest", "time", "offset":
	default:
		return nil, fmt.Errorf("%w: to must be earliest, latest, time or offset, not %q", model.ErrInvalidConfig, req.To)
	}
	current := b.FetchAllOffsets(group)
	var topics []*broker.Topic
	if req.Topic != "" {
		name, err := model.ParseTopicName(req.Topic)
		if err != nil {
			return nil, err
		}
		t, err := b.Topic(name)
		if err != nil {
			return nil, err
		}
		topics = append(topics, t)
	} else {
		for t := range current {
			topics = append(topics, t)
		}
		if len(topics) == 0 {
			return nil, fmt.Errorf("%w: no committed offsets for group %s (name a topic)", model.ErrNotFound, group)
		}
		sort.Slice(topics, func(i, j int) bool { return topics[i].Name.Short() < topics[j].Name.Short() })
	}
	moves := []apiv1.OffsetMove{}
	for _, t := range topics {
		for _, q := range req.Queues {
			if _, _, ok := localQueue(b, t, int64(q)); !ok {
				return nil, fmt.Errorf("%w: %s has no queue %d", model.ErrUnknownQueue, t.Name.Short(), q)
			}
		}
		commits := map[int32]broker.OffsetCommit{}
		for i := range t.Queues {
			q := int32(i)
			if len(req.Queues) > 0 && !slices.Contains(req.Queues, apiQueue(b, t, q)) {
				continue
			}
			start, hw, _, err := b.Offsets(t.Name, q)
			if err != nil {
				return nil, err
			}
			to := start
			switch req.To {
			case "latest":
				to = hw
			case "time":
				off, _, err := b.OffsetForTime(t.Name, q, req.TimeMs)
				if err != nil {
					off = hw // nothing at or after the time
				}
				to = off
			case "offset":
				to = min(max(model.QueueOffset(req.Offset), start), hw)
			}
			from := int64(-1)
			if c, ok := current[t][q]; ok {
				from = int64(c.Offset)
			}
			moves = append(moves, apiv1.OffsetMove{Topic: t.Name.Short(), Queue: apiQueue(b, t, q), From: from, To: int64(to)})
			commits[q] = broker.OffsetCommit{Queue: t.Queues[i], Offset: to, LeaderEpoch: -1}
		}
		if !req.DryRun && len(commits) > 0 {
			if err := b.CommitOffsets(r.Context(), group, t.Name, commits); err != nil {
				return nil, err
			}
		}
	}
	return moves, nil
}

// commitMoves records offsets a reset over every replication group
// computed (the moves name topic-wide queues): for the broker's own queues,
// and for other groups' queues whose offsets of the group it already
// holds (a Kafka group's coordinator keeps them all).
func commitMoves(r *http.Request, b *broker.Broker, group string, moves []apiv1.OffsetMove) error {
	held := b.GroupQueueOffsets(group)
	var commits []broker.OffsetCommit
	for _, m := range moves {
		name, err := model.ParseTopicName(m.Topic)
		if err != nil {
			return err
		}
		t, err := b.Topic(name)
		if err != nil {
			return err
		}
		if m.Queue < 0 || int(m.Queue) >= len(t.All) || m.To < 0 {
			return fmt.Errorf("%w: %s has no queue %d", model.ErrUnknownQueue, t.Name.Short(), m.Queue)
		}
		id := t.All[m.Queue]
		_, own, _ := localQueue(b, t, int64(m.Queue))
		if _, ok := held[id]; own || ok {
			commits = append(commits, broker.OffsetCommit{Queue: id, Offset: model.QueueOffset(m.To), LeaderEpoch: -1})
		}
	}
	if len(commits) == 0 {
		return nil
	}
	return b.CommitQueueOffsets(r.Context(), group, commits)
}
