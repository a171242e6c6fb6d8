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

func groupDetail(b *broker.Broker, group string) apiv1.GroupDetail {
	d := apiv1.GroupDetail{Name: group, Offsets: []apiv1.GroupOffset{}, Members: []apiv1.GroupMember{}, LagHistory: []apiv1.LagPoint{}}
	for t, offs := range b.FetchAllOffsets(group) {
		for i, c := range offs {
			o := apiv1.GroupOffset{Topic: t.Name.Short(), Queue: i, Committed: int64(c.Offset), Metadata: c.Metadata, CommitTimeMs: c.CommitTime}
			if _, hw, _, err := b.Offsets(t.Name, i); err == nil {
				o.End = int64(hw)
				o.Lag = max(0, o.End-o.Committed)
			}
			d.Lag += o.Lag
			d.Offsets = append(d.Offsets, o)
		}
	}
	sort.Slice(d.Offsets, func(i, j int) bool {
		a, b := d.Offsets[i], d.Offsets[j]
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Queue < b.Queue
	})
	return d
}

// knownGroups lists the groups with committed offsets or live members.
func knownGroups(b *broker.Broker, members *Members) []string {
	all := append(b.OffsetGroups(), members.groups()...)
	slices.Sort(all)
	return slices.Compact(all)
}

func registerGroupAPI(mux *http.ServeMux, b *broker.Broker, sec Security, members *Members, hist *History) {
	mux.HandleFunc("GET /api/v1/groups", sec.guard(func(w http.ResponseWriter, _ *http.Request) {
		out := []apiv1.GroupSummary{}
		for _, g := range knownGroups(b, members) {
			d := groupDetail(b, g)
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
		d := groupDetail(b, group)
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
			if q < 0 || int(q) >= t.QueueCount() {
				return nil, fmt.Errorf("%w: %s has no queue %d", model.ErrUnknownQueue, t.Name.Short(), q)
			}
		}
		commits := map[int32]broker.OffsetCommit{}
		for i := range t.Queues {
			q := int32(i)
			if len(req.Queues) > 0 && !slices.Contains(req.Queues, q) {
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
			moves = append(moves, apiv1.OffsetMove{Topic: t.Name.Short(), Queue: q, From: from, To: int64(to)})
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
