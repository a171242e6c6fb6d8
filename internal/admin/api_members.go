package admin

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/groups"
	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/model"
)

// Members gathers the live members of consumer groups: the Kafka group
// coordinator's, and those of front-ends that track their own clients
// (RocketMQ remoting consumers), added as they start.
type Members struct {
	Kafka *groups.Coordinator
	// Pop is the POP engine whose progress group details show (nil: none).
	Pop *pop.Engine
	// ConsumerProtocol decodes a classic member's subscription and
	// assignment of Kafka's consumer protocol (nil: not shown).
	ConsumerProtocol func(metadata, assignment []byte) (topics []string, assigned map[string][]int32)
	mu               sync.RWMutex
	sources          []MemberSource
}

// MemberSource lists a front-end's live members of a group, and the groups
// it has members in.
type MemberSource struct {
	Members func(group string) []apiv1.GroupMember
	Groups  func() []string
}

// Add registers a front-end's members.
func (m *Members) Add(src MemberSource) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, src)
}

// groups lists the groups with live members anywhere.
func (m *Members) groups() []string {
	if m == nil {
		return nil
	}
	var out []string
	if m.Kafka != nil {
		for _, d := range m.Kafka.List() {
			out = append(out, d.Group)
		}
	}
	m.mu.RLock()
	for _, s := range m.sources {
		out = append(out, s.Groups()...)
	}
	m.mu.RUnlock()
	slices.Sort(out)
	return slices.Compact(out)
}

// describe fills d's coordinator state and members.
func (m *Members) describe(b *broker.Broker, d *apiv1.GroupDetail) {
	d.Members = []apiv1.GroupMember{}
	if m == nil {
		return
	}
	if m.Kafka != nil {
		m.describeKafka(b, d)
	}
	m.mu.RLock()
	for _, s := range m.sources {
		d.Members = append(d.Members, s.Members(d.Name)...)
	}
	m.mu.RUnlock()
	if m.Pop != nil {
		d.Pop = popProgress(m.Pop, queueRefs(b), d.Name)
	}
}

// popLeasesShown is how many in-flight messages a queue's POP progress
// lists.
const popLeasesShown = 16

// popProgress is a group's POP progress in the queues this broker holds.
func popProgress(e *pop.Engine, refs map[model.QueueID]queueRef, group string) []apiv1.PopProgress {
	var out []apiv1.PopProgress
	for _, p := range e.Progress(group, popLeasesShown) {
		ref, ok := refs[p.Queue]
		if !ok {
			continue
		}
		pp := apiv1.PopProgress{Topic: ref.topic.Name.Short(), Queue: ref.queue, Base: int64(p.Base), Next: int64(p.Next), InFlight: p.InFlight}
		for _, l := range p.Leases {
			pp.Leases = append(pp.Leases, apiv1.PopLease{Offset: int64(l.Offset), DeadlineMs: l.DeadlineMs, Attempts: l.Attempts})
		}
		out = append(out, pp)
	}
	slices.SortFunc(out, func(a, b apiv1.PopProgress) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Queue, b.Queue))
	})
	return out
}

func (m *Members) describeKafka(b *broker.Broker, d *apiv1.GroupDetail) {
	if cd, err := m.Kafka.DescribeConsumerGroup(d.Name); err == nil {
		d.Type, d.State, d.Generation = "consumer", string(cd.State), cd.Epoch
		for _, mem := range cd.Members {
			gm := apiv1.GroupMember{Protocol: "kafka", MemberID: mem.MemberID, InstanceID: mem.InstanceID, ClientID: mem.ClientID,
				Host: mem.ClientHost, Subscriptions: mem.SubscribedTopicNames}
			if mem.SubscribedTopicRegex != "" {
				gm.Subscriptions = append(gm.Subscriptions, "regex "+mem.SubscribedTopicRegex)
			}
			for _, tp := range mem.Assignment {
				if t, err := b.TopicByID(tp.Topic); err == nil {
					gm.Assignment = append(gm.Assignment, apiv1.GroupAssignment{Topic: t.Name.Short(), Queues: tp.Partitions})
				}
			}
			d.Members = append(d.Members, gm)
		}
		return
	}
	if sd, err := m.Kafka.DescribeShareGroup(d.Name); err == nil {
		d.Type, d.State, d.Generation = "share", string(sd.State), sd.Epoch
		for _, mem := range sd.Members {
			gm := apiv1.GroupMember{Protocol: "kafka", MemberID: mem.MemberID, ClientID: mem.ClientID, Host: mem.ClientHost,
				Subscriptions: mem.SubscribedTopicNames}
			for _, tp := range mem.Assignment {
				if t, err := b.TopicByID(tp.Topic); err == nil {
					gm.Assignment = append(gm.Assignment, apiv1.GroupAssignment{Topic: t.Name.Short(), Queues: tp.Partitions})
				}
			}
			d.Members = append(d.Members, gm)
		}
		return
	}
	cd := m.Kafka.Describe(d.Name)
	if cd.State == groups.Dead {
		return
	}
	d.Type, d.State, d.Generation = "classic", string(cd.State), cd.Generation
	for _, mem := range cd.Members {
		gm := apiv1.GroupMember{Protocol: "kafka", MemberID: mem.MemberID, InstanceID: mem.InstanceID, ClientID: mem.ClientID, Host: mem.ClientHost}
		if cd.ProtocolType == "consumer" && m.ConsumerProtocol != nil {
			topics, assigned := m.ConsumerProtocol(mem.Metadata, mem.Assignment)
			gm.Subscriptions = topics
			for t, parts := range assigned {
				gm.Assignment = append(gm.Assignment, apiv1.GroupAssignment{Topic: t, Queues: parts})
			}
			slices.SortFunc(gm.Assignment, func(a, b apiv1.GroupAssignment) int { return strings.Compare(a.Topic, b.Topic) })
		}
		d.Members = append(d.Members, gm)
	}
}

// deleteKafka forgets the Kafka coordinator's state of an empty group
// (groups.ErrGroupNotEmpty while it has members).
func (m *Members) deleteKafka(group string) error {
	if m == nil || m.Kafka == nil {
		return nil
	}
	return m.Kafka.Delete(group)
}
