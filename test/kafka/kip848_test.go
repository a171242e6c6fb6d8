package kafka_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// kip848Config is a test node whose consumer-protocol groups heartbeat
// quickly.
func kip848Config(t *testing.T) app.Config {
	c := apptest.TestConfig(t.TempDir())
	c.Broker.GroupConsumerHeartbeatInterval = 250 * time.Millisecond
	c.Broker.GroupConsumerSessionTimeout = 6 * time.Second
	return c
}

// ownership tracks which member owns each partition, from the members'
// assignment callbacks, and fails on a partition owned twice or a kept
// partition revoked.
type ownership struct {
	t       *testing.T
	mu      sync.Mutex
	owner   map[int32]string
	revoked map[string]int // revocations per member
	events  []string
}

func newOwnership(t *testing.T) *ownership {
	return &ownership{t: t, owner: map[int32]string{}, revoked: map[string]int{}}
}

func (o *ownership) assigned(member string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf("%s +%v", member, ps))
	for _, p := range ps {
		if cur, ok := o.owner[p]; ok && cur != member {
			o.t.Errorf("partition %d assigned to %s while %s owns it (events: %v)", p, member, cur, o.events)
		}
		o.owner[p] = member
	}
}

func (o *ownership) released(member string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, fmt.Sprintf("%s -%v", member, ps))
	o.revoked[member] += len(ps)
	for _, p := range ps {
		if o.owner[p] == member {
			delete(o.owner, p)
		}
	}
}

// balanced reports whether members own all 16 partitions between them in
// shares differing by at most one (the group has converged).
func (o *ownership) balanced(members ...string) bool {
	total, lo, hi := 0, 16, 0
	for _, m := range members {
		n := len(o.owned(m))
		total += n
		lo, hi = min(lo, n), max(hi, n)
	}
	return total == 16 && hi-lo <= 1
}

// owned lists the partitions a member owns.
func (o *ownership) owned(member string) []int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []int32
	for p, m := range o.owner {
		if m == member {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// kip848Member is one consumer-protocol member.
type kip848Member struct {
	name   string
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startKIP848Member(t *testing.T, addr, topic, group, name string, bal kgo.GroupBalancer, own *ownership, out *consumed, opts ...kgo.Opt) *kip848Member {
	t.Helper()
	topicOf := func(m map[string][]int32) []int32 { return m[topic] }
	base := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.ServerSideBalancer(), kgo.Balancers(bal), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitInterval(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.assigned(name, topicOf(m)) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				t.Logf("%s: commit on revoke: %v", name, err)
			}
			own.released(name, topicOf(m))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { own.released(name, topicOf(m)) }),
		kgo.AutoCommitMarks(), kgo.BlockRebalanceOnPoll(),
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &kip848Member{name: name, cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				out.add(r)
				cl.MarkCommitRecords(r)
			})
			cl.AllowRebalance()
		}
	}()
	return m
}

// stop leaves the group cleanly, committing what was consumed.
func (m *kip848Member) stop(t *testing.T, own *ownership) {
	m.cancel()
	<-m.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cl.CommitMarkedOffsets(ctx); err != nil {
		t.Logf("%s: final commit: %v", m.name, err)
	}
	m.cl.Close()
	own.released(m.name, own.owned(m.name))
}

// TestKIP848GroupsFranz runs franz-go consumer-protocol groups (uniform via
// the sticky balancer, and range) on a 16-partition topic while members join,
// leave and restart and a producer keeps writing: every record is consumed,
// no partition is ever owned by two members, a join into a three-member
// group revokes only the partitions that move, and committed offsets survive
// member restarts.
func TestKIP848GroupsFranz(t *testing.T) {
	for name, bal := range map[string]kgo.GroupBalancer{"uniform": kgo.StickyBalancer(), "range": kgo.RangeBalancer()} {
		t.Run(name, func(t *testing.T) {
			n := apptest.StartTestNode(t, kip848Config(t))
			ctx := ctxTimeout(t, 3*time.Minute)
			topic, group := "kip848-"+name, "g848-"+name
			adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
			if _, err := adm.CreateTopic(ctx, 16, 1, nil, topic); err != nil {
				t.Fatal(err)
			}
			p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2*time.Millisecond))
			const total = 16000
			prodDone := make(chan error, 1)
			go func() {
				for chunk := 0; chunk < total/400; chunk++ {
					var recs []*kgo.Record
					for i := chunk * 400; i < (chunk+1)*400; i++ {
						recs = append(recs, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")})
					}
					if err := p.ProduceSync(ctx, recs...).FirstErr(); err != nil {
						prodDone <- err
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
				prodDone <- nil
			}()
			out := &consumed{seen: map[int]int{}}
			own := newOwnership(t)
			a := startKIP848Member(t, n.KafkaAddr(), topic, group, "a", bal, own, out)
			b := startKIP848Member(t, n.KafkaAddr(), topic, group, "b", bal, own, out)
			eventually(t, 30*time.Second, "a and b share the partitions", func() bool { return own.balanced("a", "b") })
			c := startKIP848Member(t, n.KafkaAddr(), topic, group, "c", bal, own, out)
			eventually(t, 30*time.Second, "three members share the partitions", func() bool { return own.balanced("a", "b", "c") })
			// A fourth member joins a three-member group: the others give
			// up only what moves to it and keep consuming the rest.
			keptA, keptB, keptC := own.owned("a"), own.owned("b"), own.owned("c")
			d := startKIP848Member(t, n.KafkaAddr(), topic, group, "d", bal, own, out)
			eventually(t, 30*time.Second, "four members share the partitions", func() bool { return own.balanced("a", "b", "c", "d") })
			for member, before := range map[string][]int32{"a": keptA, "b": keptB, "c": keptC} {
				after := own.owned(member)
				if len(after) == 0 {
					t.Fatalf("%s lost every partition when d joined", member)
				}
				if name == "uniform" {
					for _, p := range after {
						if !contains32(before, p) {
							t.Fatalf("%s gained partition %d when d joined (sticky assignment moves only to d)", member, p)
						}
					}
				}
			}
			own.mu.Lock()
			for _, ev := range own.events {
				t.Log(ev)
			}
			own.mu.Unlock()
			// b leaves, then comes back as a new member.
			b.stop(t, own)
			eventually(t, 30*time.Second, "a, c and d take over b's partitions", func() bool { return own.balanced("a", "c", "d") })
			b2 := startKIP848Member(t, n.KafkaAddr(), topic, group, "b2", bal, own, out)
			if err := <-prodDone; err != nil {
				t.Fatal(err)
			}
			eventually(t, 60*time.Second, "every record consumed", func() bool { return out.count() == total })
			for _, m := range []*kip848Member{a, c, d, b2} {
				m.stop(t, own)
			}
			// Commits survive the members: the group's committed offsets
			// reach the end of every partition.
			committed, err := adm.FetchOffsets(ctx, group)
			if err != nil {
				t.Fatal(err)
			}
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			ends.Each(func(e kadm.ListedOffset) {
				o, ok := committed.Lookup(topic, e.Partition)
				if !ok || o.At != e.Offset {
					t.Errorf("partition %d: committed %d, end %d", e.Partition, o.At, e.Offset)
				}
			})
			// A restarted member resumes from the commits: nothing is
			// consumed again.
			again := &consumed{seen: map[int]int{}}
			e := startKIP848Member(t, n.KafkaAddr(), topic, group, "e", bal, own, again)
			eventually(t, 30*time.Second, "e owns every partition", func() bool { return len(own.owned("e")) == 16 })
			// One more record per partition: e gets exactly those, and
			// would get anything it consumed again before them.
			manual := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			for part := range int32(16) {
				if err := manual.ProduceSync(ctx, &kgo.Record{Partition: part, Key: []byte(strconv.Itoa(total + int(part))), Value: []byte("v")}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 30*time.Second, "e consumes the new records", func() bool { return again.count() >= 16 })
			e.stop(t, own)
			if again.count() != 16 {
				t.Fatalf("a restarted member consumed %d records again", again.count()-16)
			}
		})
	}
}

func contains32(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
