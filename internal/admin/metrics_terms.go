package admin

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// termSet holds the registries of the brokers a cluster member runs while
// it leads their replication groups; /metrics serves them all beside the
// node's own, each metric labelled replication_group when there are several groups
// (consumer group metrics have a label "group" of their own).
type termSet struct {
	mu    sync.Mutex
	terms map[*prometheus.Registry]string // registry → group label ("": none)
}

func (s *termSet) add(r *prometheus.Registry, group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.terms == nil {
		s.terms = map[*prometheus.Registry]string{}
	}
	s.terms[r] = group
}

func (s *termSet) remove(r *prometheus.Registry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.terms, r)
}

// Gather gathers every term's registry, labelling its metrics.
func (s *termSet) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	gs := make(prometheus.Gatherers, 0, len(s.terms))
	for r, group := range s.terms {
		gs = append(gs, labelled{r, group})
	}
	s.mu.Unlock()
	return gs.Gather()
}

// labelled gathers a registry with a group label on every metric.
type labelled struct {
	g     prometheus.Gatherer
	group string
}

func (l labelled) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := l.g.Gather()
	if l.group == "" {
		return mfs, err
	}
	name, value := "replication_group", l.group
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: &name, Value: &value})
		}
	}
	return mfs, err
}
