package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupJoinOptions describe the group-convergence measurement.
type GroupJoinOptions struct {
	KafkaOptions
	Protocol  string        // "consumer" (KIP-848, server-side uniform assignor) or "classic" (cooperative-sticky)
	Rounds    int           // joins measured
	Heartbeat time.Duration // classic members' heartbeat interval (consumer members use the broker's)
	Settle    time.Duration // pause between the first two members settling and the third joining
}

// groupTracker follows which member owns which partitions.
type groupTracker struct {
	mu      sync.Mutex
	owner   map[int32]string
	revoked map[string]int
	changed chan struct{}
}

func (g *groupTracker) update(member string, ps []int32, add bool) {
	g.mu.Lock()
	for _, p := range ps {
		if add {
			g.owner[p] = member
		} else if g.owner[p] == member {
			delete(g.owner, p)
			g.revoked[member]++
		}
	}
	g.mu.Unlock()
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// settled reports whether every partition is owned and members hold
// balanced shares (counts differing by at most one).
func (g *groupTracker) settled(partitions int, members []string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.owner) != partitions {
		return false
	}
	per := map[string]int{}
	for _, m := range g.owner {
		per[m]++
	}
	lo, hi := partitions, 0
	for _, m := range members {
		lo, hi = min(lo, per[m]), max(hi, per[m])
	}
	return hi-lo <= 1
}

// KafkaGroupJoin measures how long a consumer group takes to converge after
// a third member joins two settled members: from the new member's start
// until every partition is owned and the three hold balanced shares. It also counts
// the partitions the two existing members gave up (only what moves, for an
// incremental protocol).
func KafkaGroupJoin(ctx context.Context, o GroupJoinOptions) (*Report, error) {
	if err := o.ensureTopic(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Name: "kafka group join (" + o.Protocol + ")"}
	totalRevoked := 0
	for round := 0; round < o.Rounds; round++ {
		group := fmt.Sprintf("bench-join-%s-%d-%d", o.Protocol, time.Now().UnixNano(), round)
		tr := &groupTracker{owner: map[int32]string{}, revoked: map[string]int{}, changed: make(chan struct{}, 1)}
		var clients []*kgo.Client
		start := func(name string) error {
			opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(o.Brokers, ",")...), kgo.ConsumeTopics(o.Topic), kgo.ConsumerGroup(group),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { tr.update(name, m[o.Topic], true) }),
				kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { tr.update(name, m[o.Topic], false) }),
				kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { tr.update(name, m[o.Topic], false) })}
			if o.Protocol == "consumer" {
				opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
			} else {
				opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.HeartbeatInterval(o.Heartbeat),
					kgo.SessionTimeout(max(6*time.Second, 3*o.Heartbeat)))
			}
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				return err
			}
			clients = append(clients, cl)
			go func() {
				for {
					fs := cl.PollFetches(ctx)
					if fs.IsClientClosed() || ctx.Err() != nil {
						return
					}
				}
			}()
			return nil
		}
		wait := func(members []string) error {
			deadline := time.After(2 * time.Minute)
			for !tr.settled(o.Partitions, members) {
				select {
				case <-tr.changed:
				case <-deadline:
					return fmt.Errorf("group did not settle with %v", members)
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
		err := start("a")
		if err == nil {
			err = start("b")
		}
		if err == nil {
			err = wait([]string{"a", "b"})
		}
		if err == nil {
			// Steady state: the members are on their stable heartbeat.
			time.Sleep(o.Settle)
			tr.mu.Lock()
			tr.revoked = map[string]int{}
			tr.mu.Unlock()
			t0 := time.Now()
			if err = start("c"); err == nil {
				err = wait([]string{"a", "b", "c"})
			}
			rep.Latencies = append(rep.Latencies, time.Since(t0))
			tr.mu.Lock()
			totalRevoked += tr.revoked["a"] + tr.revoked["b"]
			tr.mu.Unlock()
		}
		for _, cl := range clients {
			cl.Close()
		}
		if err != nil {
			return nil, err
		}
	}
	rep.Records = int64(o.Rounds)
	for _, l := range rep.Latencies {
		rep.Elapsed += l
	}
	rep.Extra = append(rep.Extra, fmt.Sprintf("partitions given up by the two existing members per join: %.1f (of %d)",
		float64(totalRevoked)/float64(o.Rounds), o.Partitions))
	return rep, nil
}
