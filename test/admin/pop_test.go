//go:build !race

package admin_test

import (
	"context"
	"os"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestGroupPopProgress: a RocketMQ 5 SimpleConsumer's group shows its POP
// progress live — base at the lowest unacknowledged message, next past the
// last handed out, the in-flight messages with their deadlines — before
// any offset is committed.
func TestGroupPopProgress(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	api(t, base, "POST", "/api/v1/topics", map[string]any{"name": "popped", "queues": 1}, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("popped"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range []string{"a", "b", "c"} {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	os.Setenv("rocketmq.client.logRoot", t.TempDir())
	os.Setenv("rocketmq.client.logLevel", "error")
	rmq.ResetLogger()
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: n.GRPCAddr(), ConsumerGroup: "pop-g", Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{"popped": rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	defer sc.GracefulStop()
	var got []*rmq.MessageView
	apptest.Eventually(t, 30*time.Second, "the three messages to be received", func() bool {
		mvs, _ := sc.Receive(context.Background(), int32(3-len(got)), time.Minute)
		got = append(got, mvs...)
		return len(got) == 3
	})
	received := time.Now()
	if err := sc.Ack(context.Background(), got[0]); err != nil {
		t.Fatal(err)
	}
	var d apiv1.GroupDetail
	api(t, base, "GET", "/api/v1/groups/pop-g", nil, &d)
	if len(d.Pop) != 1 {
		t.Fatalf("POP progress: %+v", d)
	}
	p := d.Pop[0]
	if p.Topic != "popped" || p.Queue != 0 || p.Base != 1 || p.Next != 3 || p.InFlight != 2 || len(p.Leases) != 2 ||
		p.Leases[0].Offset != 1 || p.Leases[1].Offset != 2 || p.Leases[0].Attempts != 1 {
		t.Fatalf("POP progress: %+v", p)
	}
	if dl := time.UnixMilli(p.Leases[0].DeadlineMs); dl.Before(received.Add(50*time.Second)) || dl.After(received.Add(70*time.Second)) {
		t.Fatalf("lease deadline %v, received at %v with a minute's invisibility", dl, received)
	}
}
