package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rosettamq/rosetta/internal/broker"
)

// flowCollector exports, at scrape time, what dashboards chart per topic
// and consumer group: each topic's end offsets summed over its queues (a
// counter: its rate is the topic's message rate) and messages held, and
// each group's lag per topic (the messages between its committed offsets
// and the ends) and committed offsets summed (their rate is the group's
// consumption rate).
type flowCollector struct {
	b                        *broker.Broker
	topicEnd, topicHeld      *prometheus.Desc
	groupLag, groupCommitted *prometheus.Desc
}

func newFlowCollector(b *broker.Broker) *flowCollector {
	return &flowCollector{b: b,
		topicEnd:       prometheus.NewDesc("rosetta_topic_end_offsets", "A topic's end offsets summed over its queues (its rate is the topic's message rate).", []string{"topic"}, nil),
		topicHeld:      prometheus.NewDesc("rosetta_topic_messages", "Messages a topic holds (end minus start offsets).", []string{"topic"}, nil),
		groupLag:       prometheus.NewDesc("rosetta_group_lag", "Messages between a consumer group's committed offsets and the ends, per topic.", []string{"group", "topic"}, nil),
		groupCommitted: prometheus.NewDesc("rosetta_group_committed_offsets", "A consumer group's committed offsets summed per topic (their rate is its consumption rate).", []string{"group", "topic"}, nil),
	}
}

func (c *flowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.topicEnd
	ch <- c.topicHeld
	ch <- c.groupLag
	ch <- c.groupCommitted
}

func (c *flowCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.b.Topics(false) {
		var end, held int64
		for i := range t.Queues {
			if start, hw, _, err := c.b.Offsets(t.Name, int32(i)); err == nil {
				end += int64(hw)
				held += int64(hw - start)
			}
		}
		name := t.Name.Short()
		ch <- prometheus.MustNewConstMetric(c.topicEnd, prometheus.CounterValue, float64(end), name)
		ch <- prometheus.MustNewConstMetric(c.topicHeld, prometheus.GaugeValue, float64(held), name)
	}
	refs := queueRefs(c.b)
	for _, g := range c.b.OffsetGroups() {
		lag, committed := map[string]int64{}, map[string]int64{}
		for _, o := range groupDetail(c.b, refs, g).Offsets {
			lag[o.Topic] += o.Lag
			committed[o.Topic] += o.Committed
		}
		for topic, l := range lag {
			ch <- prometheus.MustNewConstMetric(c.groupLag, prometheus.GaugeValue, float64(l), g, topic)
			ch <- prometheus.MustNewConstMetric(c.groupCommitted, prometheus.CounterValue, float64(committed[topic]), g, topic)
		}
	}
}
