package member

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// replicaCollector exports the replica's view of its groups to Prometheus.
type replicaCollector struct {
	m                                           *Member
	leader, term, commit, applied, last, isLead *prometheus.Desc
	changes, lag, match                         *prometheus.Desc
	imagesServed, imagesInstalled               *prometheus.Desc
}

// Collector exports the member's view of the groups it hosts to
// Prometheus (rosetta_replication_*).
func (m *Member) Collector() prometheus.Collector { return newReplicaCollector(m) }

func newReplicaCollector(m *Member) *replicaCollector {
	g := []string{"group"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("rosetta_replication_"+name, help, labels, nil)
	}
	return &replicaCollector{m: m,
		leader:  d("leader", "The node leading the group (0 while none is known).", g),
		term:    d("term", "The group's Raft term.", g),
		commit:  d("commit_index", "The group's commit index as this replica knows it.", g),
		applied: d("applied_index", "The index this replica applied (made visible) up to.", g),
		last:    d("last_index", "The last index this replica stores.", g),
		isLead:  d("writable", "1 while this replica leads and accepts appends.", g),
		changes: d("leader_changes_total", "New leaders this replica saw.", g),
		lag:     d("follower_lag", "Entries a replica is behind the commit index (reported by the leader).", []string{"group", "node"}),
		match:   d("follower_match_index", "The last index the leader knows a replica stores.", []string{"group", "node"}),
		imagesServed: d("snapshots_served_total",
			"Images of the group's engine this member sent whole to a replica that needed records the log no longer holds.", g),
		imagesInstalled: d("snapshots_installed_total", "Images of the group's engine this member installed as it started (fetched before a restart).", g),
	}
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.commit, c.applied, c.last, c.isLead, c.changes, c.lag, c.match,
		c.imagesServed, c.imagesInstalled} {
		ch <- d
	}
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	for _, gr := range c.m.Groups() {
		if r := gr.Hosted(); r != nil {
			c.collect(ch, gr, r)
		}
	}
}

func (c *replicaCollector) collect(ch chan<- prometheus.Metric, gr *Group, r *Replica) {
	st := r.Raft.Status()
	g := strconv.Itoa(int(st.Group))
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.leader, float64(st.Leader), g)
	gauge(c.term, float64(st.Term), g)
	gauge(c.commit, float64(st.Commit), g)
	gauge(c.applied, float64(st.Applied), g)
	gauge(c.last, float64(st.Last), g)
	w := 0.0
	if st.Writable {
		w = 1
	}
	gauge(c.isLead, w, g)
	ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(r.Raft.LeaderChanges()), g)
	ch <- prometheus.MustNewConstMetric(c.imagesServed, prometheus.CounterValue, float64(gr.imagesServed.Load()), g)
	ch <- prometheus.MustNewConstMetric(c.imagesInstalled, prometheus.CounterValue, float64(gr.imagesInstalled.Load()), g)
	for _, p := range st.Replicas {
		n := strconv.Itoa(int(p.Node))
		gauge(c.lag, float64(p.Lag), g, n)
		gauge(c.match, float64(p.Match), g, n)
	}
}
