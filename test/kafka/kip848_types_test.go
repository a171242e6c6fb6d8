package kafka_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// consumeN reads n records in group with a member of the given kind
// (classic or KIP-848), commits them and leaves.
func consumeN(t *testing.T, addr, topic, group string, kip848 bool, n int) map[string]bool {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), kgo.FetchMaxBytes(1 << 20)}
	if kip848 {
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.StickyBalancer()))
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[string]bool{}
	for len(got) < n {
		fs := cl.PollRecords(ctx, n-len(got))
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d (kip848 %v)", len(got), n, kip848)
		}
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Key)] = true })
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	return got
}

// TestGroupTypesSideBySide: a group id is classic or consumer, never both;
// an empty group converts either way keeping its committed offsets; group
// types show in ListGroups v5 and ConsumerGroupDescribe; a classic join of a
// live consumer group is refused.
func TestGroupTypesSideBySide(t *testing.T) {
	n := apptest.StartTestNode(t, kip848Config(t))
	ctx := ctxTimeout(t, 2*time.Minute)
	cl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "types"); err != nil {
		t.Fatal(err)
	}
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("types"))
	for i := 0; i < 300; i++ {
		p.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, nil)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// classic → consumer → classic, each resuming from the other's commits.
	seen := map[string]bool{}
	for i, kip848 := range []bool{false, true, false} {
		for k := range consumeN(t, n.KafkaAddr(), "types", "converting", kip848, 100) {
			if seen[k] {
				t.Fatalf("step %d consumed %s again: commits did not carry over", i, k)
			}
			seen[k] = true
		}
	}

	// A live consumer group: typed in ListGroups, described by
	// ConsumerGroupDescribe, refused to classic joiners.
	_ = newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("types"), kgo.ConsumerGroup("live848"),
		kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	eventually(t, 30*time.Second, "the live group to be stable", func() bool {
		d, err := adm.DescribeConsumerGroups(ctx, "live848")
		return err == nil && d["live848"].State == "Stable" && len(d["live848"].Members) == 1 &&
			len(d["live848"].Members[0].Assignment["types"]) == 4
	})
	d, _ := adm.DescribeConsumerGroups(ctx, "live848")
	if g := d["live848"]; g.AssignorName != "range" || g.Epoch < 1 {
		t.Fatalf("described: %+v", g)
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := listed["live848"]; g.GroupType != "consumer" || g.State != "Stable" {
		t.Fatalf("listed live848 as %+v", g)
	}
	if g := listed["converting"]; g.GroupType != "classic" {
		t.Fatalf("listed converting as %+v", g)
	}
	byType, err := adm.ListGroupsByType(ctx, []string{"consumer"})
	if err != nil || len(byType) != 1 {
		t.Fatalf("consumer groups: %v %v", byType.Groups(), err)
	}
	if cd, _ := adm.DescribeConsumerGroups(ctx, "converting"); cd["converting"].Err != kerr.GroupIDNotFound {
		t.Fatalf("ConsumerGroupDescribe of a classic group: %v", cd["converting"].Err)
	}
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis, join.ProtocolType = "live848", 10000, 10000, "consumer"
	join.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0}}}
	jr, err := join.RequestWith(ctx, cl)
	if err != nil || jr.ErrorCode != kerr.GroupIDNotFound.Code {
		t.Fatalf("classic join of a live consumer group: %v %v", jr, err)
	}
}

// TestKIP848RegexPicksUpNewTopics: a regex subscription is resolved on the
// broker, and a topic created later that matches is assigned.
func TestKIP848RegexPicksUpNewTopics(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, kip848Config(t))
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "re-one"); err != nil {
		t.Fatal(err)
	}
	own := newOwnership(t)
	out := &consumed{seen: map[int]int{}}
	m := startKIP848Member(t, n.KafkaAddr(), "re-.*", "regex848", "m", kgo.StickyBalancer(), own, out, kgo.ConsumeRegex(),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	defer m.stop(t, own)
	eventually(t, 30*time.Second, "re-one assigned", func() bool {
		d, err := adm.DescribeConsumerGroups(ctx, "regex848")
		g := d["regex848"]
		return err == nil && len(g.Members) == 1 && len(g.Members[0].Assignment["re-one"]) == 2
	})
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "re-two"); err != nil {
		t.Fatal(err)
	}
	p := newClient(t, n.KafkaAddr())
	for i := 0; i < 10; i++ {
		topic := "re-one"
		if i%2 == 1 {
			topic = "re-two"
		}
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "records of both topics consumed", func() bool { return out.count() == 10 })
	d, err := adm.DescribeConsumerGroups(ctx, "regex848")
	if err != nil {
		t.Fatal(err)
	}
	g := d["regex848"]
	if len(g.Members) != 1 || g.Members[0].SubscribedTopicRegex == nil ||
		len(g.Members[0].Assignment["re-one"]) != 2 || len(g.Members[0].Assignment["re-two"]) != 3 {
		t.Fatalf("described: %+v", g.Members)
	}
}

// TestKIP848RegexIncludesInternalTopics: as in Kafka 4, a regex is matched
// against every topic, internal ones included; a member whose regex names
// __consumer_offsets is assigned it (clients filter internal topics out
// themselves).
func TestKIP848RegexIncludesInternalTopics(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, kip848Config(t))
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	md, err := kadm.NewClient(cl).Metadata(ctx, "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	offsetsTopic := md.Topics["__consumer_offsets"]
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.RebalanceTimeoutMillis = "regex-internal", "member-regex-internal-1", 10000
	hb.SubscribedTopicRegex = kmsg.StringPtr("__consumer_offsets")
	hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	var assigned int
	eventually(t, 20*time.Second, "__consumer_offsets assigned", func() bool {
		resp, err := hb.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("heartbeat: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
		}
		hb.MemberEpoch = resp.MemberEpoch
		if resp.Assignment != nil {
			for _, tp := range resp.Assignment.Topics {
				if tp.TopicID == offsetsTopic.ID {
					assigned = len(tp.Partitions)
				}
			}
		}
		return assigned > 0
	})
	if assigned != len(offsetsTopic.Partitions) {
		t.Fatalf("assigned %d of %d __consumer_offsets partitions", assigned, len(offsetsTopic.Partitions))
	}
}
