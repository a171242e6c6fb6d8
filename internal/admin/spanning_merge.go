package admin

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/rosettamq/rosetta/internal/apiv1"
)

// The cluster-wide answers about messages, consumer groups, transactions,
// timers, dead letters and traces, merged from every group's.

// sortBy sorts s by key, keeping the order of equal keys.
func sortBy[T any, K cmp.Ordered](s []T, key func(T) K) {
	slices.SortStableFunc(s, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
}

// limitParam reads the limit parameter (def when absent or bad: the
// groups' handlers answered the bad ones already).
func limitParam(r *http.Request, def int) int {
	if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
		return n
	}
	return def
}

func (s *spanning) messages(w http.ResponseWriter, r *http.Request) {
	lists, ok := gather[[]apiv1.MessageView](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	out := []apiv1.MessageView{}
	for _, l := range lists {
		out = append(out, l...)
	}
	sortBy(out, func(m apiv1.MessageView) int64 { return m.StoreTimeMs })
	writeJSON(w, out[:min(len(out), limitParam(r, 32))])
}

// groupPath is the API path of a consumer group.
func groupPath(group string) string { return "/api/v1/groups/" + url.PathEscape(group) }

// mergeGroup merges one consumer group's shares: offsets by queue (the
// newest commit where two groups hold one), members once each, the
// coordinator's state; then lag from every queue's end.
func (s *spanning) mergeGroup(shares []apiv1.GroupDetail, ends map[string]map[int32]int64) apiv1.GroupDetail {
	d := apiv1.GroupDetail{Name: shares[0].Name, Offsets: []apiv1.GroupOffset{}, Members: []apiv1.GroupMember{}, LagHistory: []apiv1.LagPoint{}}
	type key struct {
		topic string
		queue int32
	}
	at := map[key]int{}
	seen := map[[5]string]bool{}
	for _, sh := range shares {
		for _, o := range sh.Offsets {
			k := key{o.Topic, o.Queue}
			if i, ok := at[k]; ok {
				end := max(d.Offsets[i].End, o.End)
				if o.CommitTimeMs > d.Offsets[i].CommitTimeMs {
					d.Offsets[i] = o
				}
				d.Offsets[i].End = end
				continue
			}
			at[k] = len(d.Offsets)
			d.Offsets = append(d.Offsets, o)
		}
		for _, p := range sh.Pop {
			if !slices.ContainsFunc(d.Pop, func(q apiv1.PopProgress) bool { return q.Topic == p.Topic && q.Queue == p.Queue }) {
				d.Pop = append(d.Pop, p)
			}
		}
		for _, m := range sh.Members {
			id := [5]string{m.Protocol, m.MemberID, m.InstanceID, m.ClientID, m.Host}
			if !seen[id] {
				seen[id] = true
				d.Members = append(d.Members, m)
			}
		}
		if d.Type == "" && sh.Type != "" {
			d.Type, d.State, d.Generation = sh.Type, sh.State, sh.Generation
		}
		d.LagHistory = addHistory(d.LagHistory, sh.LagHistory)
	}
	for i := range d.Offsets {
		o := &d.Offsets[i]
		if o.End < 0 {
			if e, ok := ends[o.Topic][o.Queue]; ok {
				o.End = e
			} else {
				o.End = o.Committed
			}
		}
		o.Lag = max(0, o.End-o.Committed)
		d.Lag += o.Lag
	}
	sortOffsets(d.Offsets)
	return d
}

// addHistory adds one group's lag samples to the sum, aligned at the
// newest (each group's leader samples every 10 s on its own clock).
func addHistory(sum, h []apiv1.LagPoint) []apiv1.LagPoint {
	if len(h) > len(sum) {
		sum, h = append([]apiv1.LagPoint(nil), h...), sum
	}
	for i := range h {
		sum[len(sum)-1-i].Lag += h[len(h)-1-i].Lag
	}
	return sum
}

// queueEnds asks for the queue ends of the topics offsets name whose ends
// their holders do not know (another group's queues).
func (s *spanning) queueEnds(r *http.Request, shares ...[]apiv1.GroupDetail) map[string]map[int32]int64 {
	ends := map[string]map[int32]int64{}
	for _, list := range shares {
		for _, d := range list {
			for _, o := range d.Offsets {
				if _, done := ends[o.Topic]; o.End >= 0 || done {
					continue
				}
				ends[o.Topic] = map[int32]int64{}
				if t, _, ok := s.topicDetail(&discard{}, r, o.Topic); ok {
					for _, q := range t.QueueList {
						ends[o.Topic][q.Queue] = q.End
					}
				}
			}
		}
	}
	return ends
}

func (s *spanning) groups(w http.ResponseWriter, r *http.Request) {
	req := sub(r, nil)
	req.Target = "/api/v1/groups?details=true"
	lists, ok := gather[[]apiv1.GroupDetail](s, w, r, req, false)
	if !ok {
		return
	}
	sums, ok := gather[[]apiv1.GroupSummary](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	byName := map[string][]apiv1.GroupDetail{}
	for _, l := range lists {
		for _, d := range l {
			byName[d.Name] = append(byName[d.Name], d)
		}
	}
	ends := s.queueEnds(r, lists...)
	out := []apiv1.GroupSummary{}
	for name, shares := range byName {
		d := s.mergeGroup(shares, ends)
		topics := map[string]bool{}
		for _, o := range d.Offsets {
			topics[o.Topic] = true
		}
		g := apiv1.GroupSummary{Name: name, Topics: len(topics), Lag: d.Lag, Members: len(d.Members), State: d.State}
		for _, l := range sums {
			for _, sm := range l {
				if sm.Name == name {
					g.ConsumedPerSec += sm.ConsumedPerSec
					g.Stuck = g.Stuck || sm.Stuck
				}
			}
		}
		out = append(out, g)
	}
	sortBy(out, func(g apiv1.GroupSummary) string { return g.Name })
	writeJSON(w, out)
}

// groupDetail asks every group for a consumer group and merges (ok false
// once it answered a failure).
func (s *spanning) groupDetail(w http.ResponseWriter, r *http.Request, group string) (apiv1.GroupDetail, bool) {
	req := SubRequest{Method: http.MethodGet, Target: groupPath(group), Header: sub(r, nil).Header}
	shares, ok := gather[apiv1.GroupDetail](s, w, r, req, true)
	if !ok {
		return apiv1.GroupDetail{}, false
	}
	return s.mergeGroup(shares, s.queueEnds(r, shares)), true
}

func (s *spanning) group(w http.ResponseWriter, r *http.Request) {
	if d, ok := s.groupDetail(w, r, r.PathValue("group")); ok {
		writeJSON(w, d)
	}
}

// reset moves a consumer group's offsets over every group: each group
// computes the moves of its own queues (a dry run), then every group
// records those it keeps (its own queues; a Kafka coordinator all of its
// group's).
func (s *spanning) reset(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	group := r.PathValue("group")
	var req apiv1.OffsetReset
	if err := json.Unmarshal(b, &req); err != nil {
		if a, ok := s.one(w, r, 0, sub(r, b)); ok {
			pass(w, a) // group 0 answers the error
		}
		return
	}
	current, ok := s.groupDetail(&discard{}, r, group)
	topics := []string{req.Topic}
	if req.Topic == "" {
		topics = nil
		for _, o := range current.Offsets {
			if !slices.Contains(topics, o.Topic) {
				topics = append(topics, o.Topic)
			}
		}
		if !ok || len(topics) == 0 {
			apiError(w, http.StatusNotFound, "not_found", "no committed offsets for group "+group+" (name a topic)")
			return
		}
	}
	from := map[string]int64{}
	for _, o := range current.Offsets {
		from[o.Topic+"\x00"+strconv.Itoa(int(o.Queue))] = o.Committed
	}
	moves := []apiv1.OffsetMove{}
	for _, t := range topics {
		dry := req
		dry.Topic, dry.DryRun = t, true
		db, _ := json.Marshal(dry)
		sr := sub(r, db)
		lists, ok := gather[[]apiv1.OffsetMove](s, w, r, sr, true)
		if !ok {
			return
		}
		for _, l := range lists {
			for _, m := range l {
				m.From = -1
				if c, ok := from[m.Topic+"\x00"+strconv.Itoa(int(m.Queue))]; ok {
					m.From = c
				}
				moves = append(moves, m)
			}
		}
	}
	slices.SortStableFunc(moves, func(a, b apiv1.OffsetMove) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Queue, b.Queue))
	})
	if !req.DryRun && len(moves) > 0 {
		mb, _ := json.Marshal(moves)
		rec := SubRequest{Method: http.MethodPost, Target: groupPath(group) + "/offsets", Header: sub(r, nil).Header, Body: mb}
		answers, ok := s.all(w, r, rec)
		if !ok || failed(w, answers, false) {
			return
		}
	}
	writeJSON(w, moves)
}

// transactions lists every group's; a half message's offset names its
// group too (offset × groups + group), which commit and rollback take.
func (s *spanning) transactions(w http.ResponseWriter, r *http.Request) {
	answers, ok := s.all(w, r, sub(r, nil))
	if !ok || failed(w, answers, false) {
		return
	}
	out := apiv1.Transactions{Kafka: []apiv1.KafkaTransaction{}, RocketMQ: []apiv1.HalfMessage{}}
	for g, a := range answers {
		var t apiv1.Transactions
		if json.Unmarshal(a.Body, &t) != nil {
			continue
		}
		out.Kafka = append(out.Kafka, t.Kafka...)
		for _, h := range t.RocketMQ {
			h.Offset = h.Offset*int64(s.ask.Groups()) + int64(g)
			out.RocketMQ = append(out.RocketMQ, h)
		}
	}
	sortBy(out.RocketMQ, func(h apiv1.HalfMessage) int64 { return h.StoredMs })
	writeJSON(w, out)
}

func (s *spanning) endHalf(w http.ResponseWriter, r *http.Request) {
	off, err := strconv.ParseInt(r.PathValue("offset"), 10, 64)
	if err != nil || off < 0 {
		if a, ok := s.one(w, r, 0, sub(r, nil)); ok {
			pass(w, a) // group 0 answers the error
		}
		return
	}
	n := int64(s.ask.Groups())
	g := int(off % n)
	req := sub(r, nil)
	req.Target = "/api/v1/transactions/rocketmq/" + strconv.FormatInt(off/n, 10) + "/" + url.PathEscape(r.PathValue("action"))
	if a, ok := s.one(w, r, g, req); ok {
		pass(w, a)
	}
}

func (s *spanning) timers(w http.ResponseWriter, r *http.Request) {
	lists, ok := gather[apiv1.PendingTimers](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	out := apiv1.PendingTimers{Timers: []apiv1.PendingTimer{}}
	for _, l := range lists {
		out.Timers = append(out.Timers, l.Timers...)
		out.More = out.More || l.More
	}
	sortBy(out.Timers, func(t apiv1.PendingTimer) int64 { return t.DueMillis })
	if n := limitParam(r, 100); len(out.Timers) > n {
		out.Timers, out.More = out.Timers[:n], true
	}
	writeJSON(w, out)
}

func (s *spanning) deadLetters(w http.ResponseWriter, r *http.Request) {
	lists, ok := gather[[]apiv1.DeadLetterSummary](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	out := []apiv1.DeadLetterSummary{}
	at := map[string]int{}
	for _, l := range lists {
		for _, d := range l {
			if i, ok := at[d.Group]; ok {
				out[i].Messages += d.Messages
				out[i].Bytes += d.Bytes
				continue
			}
			at[d.Group] = len(out)
			out = append(out, d)
		}
	}
	sortBy(out, func(d apiv1.DeadLetterSummary) string { return d.Group })
	writeJSON(w, out)
}

// redrive re-drives every group's dead letters of a consumer group, or
// the offsets given in the dead-letter queue named (each replication
// group holds its own).
func (s *spanning) redrive(w http.ResponseWriter, r *http.Request) {
	b, ok := body(w, r)
	if !ok {
		return
	}
	var req apiv1.Redrive
	if json.Unmarshal(b, &req) == nil && req.Queue != nil {
		g, ok := s.groupOfQueue(w, r, strconv.Itoa(int(*req.Queue)))
		if !ok {
			return
		}
		if a, ok := s.one(w, r, g, sub(r, b)); ok {
			pass(w, a)
		}
		return
	}
	if len(req.Offsets) > 0 {
		apiError(w, http.StatusBadRequest, "bad_request", "offsets need the dead-letter queue they are in (queue): each replication group holds one")
		return
	}
	lists, ok := gather[apiv1.RedriveResult](s, w, r, sub(r, b), true)
	if !ok {
		return
	}
	out := apiv1.RedriveResult{}
	for _, l := range lists {
		out.Redriven += l.Redriven
		out.Skipped = append(out.Skipped, l.Skipped...)
		out.Next = max(out.Next, l.Next)
	}
	writeJSON(w, out)
}

func (s *spanning) trace(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("topic") != "" {
		s.byQueue(w, r) // a queue's events are in its group's trace
		return
	}
	lists, ok := gather[apiv1.MessageTrace](s, w, r, sub(r, nil), false)
	if !ok {
		return
	}
	out := apiv1.MessageTrace{Events: []apiv1.TraceEvent{}}
	for _, l := range lists {
		out.Events = append(out.Events, l.Events...)
	}
	sortBy(out.Events, func(e apiv1.TraceEvent) int64 { return e.TimeMs })
	writeJSON(w, out)
}

// storageShare is one group's GET /api/v1/storage answer.
type storageShare struct {
	LogBytes  int64            `json:"log_bytes"`
	LiveBytes int64            `json:"live_bytes"`
	Segments  []map[string]any `json:"segments"`
	Topics    map[string]struct {
		Bytes        int64   `json:"bytes"`
		Queues       []int64 `json:"queues"`
		QueueNumbers []int32 `json:"queue_numbers"`
		CleanedTo    any     `json:"cleaned_to,omitempty"`
	} `json:"topics"`
}

// storage sums every group's storage: its bytes, each segment with its
// group, each topic's bytes by topic-wide queue.
func (s *spanning) storage(w http.ResponseWriter, r *http.Request) {
	answers, ok := s.all(w, r, sub(r, nil))
	if !ok || failed(w, answers, false) {
		return
	}
	type topic struct {
		Bytes     int64   `json:"bytes"`
		Queues    []int64 `json:"queues"`
		CleanedTo any     `json:"cleaned_to,omitempty"`
	}
	var logBytes, liveBytes int64
	segs := []map[string]any{}
	topics := map[string]*topic{}
	n := s.ask.Groups()
	for g, a := range answers {
		var sh storageShare
		if err := json.Unmarshal(a.Body, &sh); err != nil {
			apiError(w, http.StatusBadGateway, "internal", "replication group "+strconv.Itoa(g)+" answered: "+err.Error())
			return
		}
		logBytes += sh.LogBytes
		liveBytes += sh.LiveBytes
		for _, seg := range sh.Segments {
			seg["group"] = g
			segs = append(segs, seg)
		}
		for name, t := range sh.Topics {
			m := topics[name]
			if m == nil {
				m = &topic{}
				topics[name] = m
			}
			m.Bytes += t.Bytes
			if m.CleanedTo == nil {
				m.CleanedTo = t.CleanedTo
			}
			for i, b := range t.Queues {
				q := i*n + g // as topics were placed before tables
				if i < len(t.QueueNumbers) {
					q = int(t.QueueNumbers[i])
				}
				for len(m.Queues) <= q {
					m.Queues = append(m.Queues, 0)
				}
				m.Queues[q] = b
			}
		}
	}
	writeJSON(w, map[string]any{"log_bytes": logBytes, "live_bytes": liveBytes, "segments": segs, "topics": topics})
}
