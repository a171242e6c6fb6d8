package pulsar

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// On a cluster each replication group's leader serves the Pulsar clients
// of the group's queues, so only it knows their producers, consumers and
// live cursors. The admin API answers a request about one partition at
// the partition's group (forwarded to its leader's admin API) and one
// about a partitioned topic spread over several groups by asking every
// group for its share (the request again, marked partQuery) and merging
// the answers.

// partQuery marks a request asking one group for its share of a topic's
// partitions.
const partQuery = "rosetta-group-share"

// merger combines the groups' answers to one request.
type merger func(w http.ResponseWriter, answers []*recorded)

// spanning serves fn over the groups holding the request's partitions:
// partition names the one a request without a partition is about (-1: all
// of them).
func (s *Server) spanning(fn http.HandlerFunc, merge merger, partition func(t *broker.Topic) int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.GroupAdmin == nil || r.URL.Query().Has(partQuery) {
			fn(w, r)
			return
		}
		ref, err := pathTopic(r)
		var t *broker.Topic
		if err == nil {
			t, err = s.b.Topic(ref.Name)
		}
		if err != nil {
			fn(w, r) // it answers the error
			return
		}
		p := ref.Partition
		if p < 0 {
			p = partition(t)
		}
		own := s.b.Placement().Group
		if p >= 0 {
			if p >= len(t.All) || t.HomeOf(p) == own {
				fn(w, r)
				return
			}
			s.opts.GroupAdmin(t.HomeOf(p)).ServeHTTP(w, r)
			return
		}
		var groups []model.GroupID
		for i := range t.All {
			if g := t.HomeOf(i); !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
		if len(groups) == 1 && groups[0] == own {
			fn(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		if err != nil {
			adminFail(w, err)
			return
		}
		slices.Sort(groups)
		answers := make([]*recorded, 0, len(groups))
		for _, g := range groups {
			sub := r.Clone(r.Context())
			q := sub.URL.Query()
			q.Set(partQuery, "true")
			sub.URL.RawQuery = q.Encode()
			sub.RequestURI = sub.URL.RequestURI()
			sub.Body, sub.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			rec := &recorded{header: http.Header{}, status: http.StatusOK}
			if g == own {
				fn(rec, sub)
			} else {
				s.opts.GroupAdmin(g).ServeHTTP(rec, sub)
			}
			answers = append(answers, rec)
		}
		merge(w, answers)
	}
}

// allPartitions: a request without a partition is about every partition.
func allPartitions(*broker.Topic) int { return -1 }

// firstPartition: a request without a partition is about partition 0 (a
// non-partitioned topic's queue).
func firstPartition(*broker.Topic) int { return 0 }

// recorded is one group's answer.
type recorded struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorded) Header() http.Header         { return r.header }
func (r *recorded) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorded) WriteHeader(status int)      { r.status = status }

func (r *recorded) ok() bool { return r.status >= 200 && r.status < 300 }

// pass writes an answer as it came.
func (r *recorded) pass(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}

// failed is the first answer that is an error other than 404 (a group
// without the subscription asked for), else a 404 when every answer is
// one; nil when some group succeeded and none failed otherwise.
func failed(answers []*recorded) *recorded {
	var notFound *recorded
	succeeded := false
	for _, a := range answers {
		switch {
		case a.ok():
			succeeded = true
		case a.status == http.StatusNotFound:
			if notFound == nil {
				notFound = a
			}
		default:
			return a
		}
	}
	if succeeded {
		return nil
	}
	return notFound
}

// mergeNoContent answers 204 when every group did its share.
func mergeNoContent(w http.ResponseWriter, answers []*recorded) {
	if f := failed(answers); f != nil {
		f.pass(w)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// mergeNames answers the union of the groups' JSON lists of names.
func mergeNames(w http.ResponseWriter, answers []*recorded) {
	if f := failed(answers); f != nil {
		f.pass(w)
		return
	}
	names := []string{}
	for _, a := range answers {
		var part []string
		if a.ok() && json.Unmarshal(a.body.Bytes(), &part) == nil {
			for _, n := range part {
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	slices.Sort(names)
	adminJSON(w, names)
}

// mergeStats sums the groups' stats of their partitions.
func mergeStats(w http.ResponseWriter, answers []*recorded) {
	if f := failed(answers); f != nil {
		f.pass(w)
		return
	}
	stats := &topicStats{}
	for _, a := range answers {
		var part topicStats
		if a.ok() && json.Unmarshal(a.body.Bytes(), &part) == nil {
			stats.add(&part)
		}
	}
	adminJSON(w, stats)
}

// globalIndex is the topic-wide index (the partition) of the broker's
// queue i.
func (s *Server) globalIndex(t *broker.Topic, i int32) int {
	if g := t.Groups.Global(s.b.Placement().Group, int(i), len(t.All)); g >= 0 {
		return g
	}
	return int(i)
}

// localIndex is the broker's index of partition p: ok false when another
// group serves it.
func (s *Server) localIndex(t *broker.Topic, p int) (int32, bool) {
	if p < 0 || p >= len(t.All) || !s.serves(t.HomeOf(p)) {
		return 0, false
	}
	return int32(t.HomeIndex(p)), true
}
