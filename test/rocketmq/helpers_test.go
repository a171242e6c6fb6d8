// Package rocketmq_test drives Rosetta's RocketMQ remoting front-end with the
// real remoting client (github.com/apache/rocketmq-client-go/v2).
package rocketmq_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

func startNode(t *testing.T) *apptest.TestNode {
	t.Helper()
	return apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	apptest.Eventually(t, d, what, cond)
}

// producerOptions points a producer of group at the name server at addr,
// in a client instance of its own.
func producerOptions(addr, group string) []producer.Option {
	return []producer.Option{producer.WithNsResolver(primitive.NewPassthroughResolver([]string{addr})), producer.WithGroupName(group),
		producer.WithInstanceName(fmt.Sprintf("%s-p%d", group, instances.Add(1)))}
}

// startProducer starts a producer of group against the name server at addr,
// with further options, in a client instance of its own (the Go client's
// shared default instance stays bound to the first node it was used with);
// it shuts down when the test ends.
func startProducer(t *testing.T, addr, group string, opts ...producer.Option) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(append(producerOptions(addr, group), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// createTopic creates a topic with queues read and write queues.
func createTopic(t *testing.T, addr, topic string, queues int) {
	t.Helper()
	q := fmt.Sprint(queues)
	if r := call(t, addr, &protocol.Command{Code: protocol.UpdateAndCreateTopic,
		ExtFields: protocol.FieldsOf(map[string]string{"topic": topic, "writeQueueNums": q, "readQueueNums": q})}); r.Code != protocol.Success {
		t.Fatalf("create topic %s: %d %s", topic, r.Code, r.Remark)
	}
}
