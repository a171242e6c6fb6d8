//go:build !race

package admin_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestGroupMembers: the admin API shows each kind of group's live members —
// a classic Kafka group and a KIP-848 one with their members' assignments,
// RocketMQ push consumers and RocketMQ 5 simple consumers with their
// subscriptions — including a group
// that has committed nothing yet.
func TestGroupMembers(t *testing.T) {
	c := apptest.TestConfig(t.TempDir())
	c.Broker.GroupConsumerHeartbeatInterval = 250 * time.Millisecond
	n := apptest.StartTestNode(t, c)
	base := "http://" + n.HTTPAddr()
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "members", "queues": 4}, nil)

	join := func(group string, opts ...kgo.Opt) *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("members"), kgo.ConsumerGroup(group),
			kgo.ClientID(group + "-client")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for !cl.PollFetches(context.Background()).IsClientClosed() {
			}
		}()
		return cl
	}
	classic := join("classic-g")
	defer classic.Close()
	next := join("next-g", kgo.ServerSideBalancer())
	defer next.Close()

	pc, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		consumer.WithGroupName("rmq-g"), consumer.WithInstance("members-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe("members", consumer.MessageSelector{Type: consumer.TAG, Expression: "a || b"},
		func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			return consumer.ConsumeSuccess, nil
		}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	defer pc.Shutdown()

	os.Setenv("rocketmq.client.logRoot", t.TempDir())
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), ConsumerGroup: "grpc-g", Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"members": rmq.NewFilterExpressionWithType("a > 1", rmq.SQL92)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	defer sc.GracefulStop()

	describe := func(group string) apiv1.GroupDetail {
		var d apiv1.GroupDetail
		api(t, base, "GET", "/api/v1/groups/"+group, nil, &d)
		return d
	}
	assigned := func(d apiv1.GroupDetail) []int32 {
		var qs []int32
		for _, m := range d.Members {
			for _, a := range m.Assignment {
				if a.Topic == "members" {
					qs = append(qs, a.Queues...)
				}
			}
		}
		slices.Sort(qs)
		return qs
	}
	all := []int32{0, 1, 2, 3}
	for _, g := range []struct{ name, typ string }{{"classic-g", "classic"}, {"next-g", "consumer"}} {
		apptest.Eventually(t, 30*time.Second, g.name+" to show its member holding every queue", func() bool {
			d := describe(g.name)
			return d.Type == g.typ && len(d.Members) == 1 && slices.Equal(assigned(d), all)
		})
		d := describe(g.name)
		if m := d.Members[0]; m.Protocol != "kafka" || m.ClientID != g.name+"-client" || m.MemberID == "" || m.Host == "" || d.State == "" {
			t.Fatalf("%s: %+v", g.name, d)
		}
	}
	if d := describe("classic-g"); !slices.Equal(d.Members[0].Subscriptions, []string{"members"}) {
		t.Fatalf("classic member's subscription: %+v", d.Members[0])
	}
	apptest.Eventually(t, 30*time.Second, "the RocketMQ consumer to show", func() bool {
		d := describe("rmq-g")
		return len(d.Members) == 1 && d.Members[0].Protocol == "rocketmq" && slices.Contains(d.Members[0].Subscriptions, "members a || b")
	})
	if d := describe("rmq-g"); !strings.Contains(d.Members[0].Client, "GO") || !strings.Contains(d.Members[0].Client, "CONSUME_PASSIVELY") {
		t.Fatalf("RocketMQ member: %+v", d.Members[0])
	}
	apptest.Eventually(t, 30*time.Second, "the RocketMQ 5 consumer to show", func() bool {
		d := describe("grpc-g")
		return len(d.Members) == 1 && d.Members[0].Protocol == "rocketmq-grpc" && slices.Contains(d.Members[0].Subscriptions, "members SQL92:a > 1")
	})
	if d := describe("grpc-g"); !strings.Contains(d.Members[0].Client, "GOLANG") || !strings.Contains(d.Members[0].Client, "SIMPLE_CONSUMER") || d.Members[0].Host == "" {
		t.Fatalf("RocketMQ 5 member: %+v", d.Members[0])
	}
	var list []apiv1.GroupSummary
	if code := api(t, base, "GET", "/api/v1/groups", nil, &list); code != http.StatusOK {
		t.Fatalf("list: %d", code)
	}
	got := map[string]int{}
	for _, g := range list {
		got[g.Name] = g.Members
	}
	if got["classic-g"] != 1 || got["next-g"] != 1 || got["rmq-g"] != 1 || got["grpc-g"] != 1 {
		t.Fatalf("group list: %+v", list)
	}
	if code := api(t, base, "GET", "/api/v1/groups/nobody", nil, nil); code != http.StatusNotFound {
		t.Fatalf("unknown group: %d", code)
	}
}
