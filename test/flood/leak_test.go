// Package flood drives the broker as a misbehaving client would and checks
// that what it holds for such clients comes back.
package flood

import (
	"context"
	"math"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// openFDs counts this process's open file descriptors (the broker runs in
// it).
func openFDs(t *testing.T) int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(entries)
}

// TestAbandonedRequestsGiveBackWhatTheyHeld: clients that park long polls
// (Kafka Fetch with MaxWait 2^31-1 ms, RocketMQ pulls suspended for a
// minute) and clients that start a request and stop sending, on every
// protocol, then go away: the broker's goroutines and descriptors return
// to their count before them within seconds, not at the end of the polls'
// waits or the requests' deadlines.
func TestAbandonedRequestsGiveBackWhatTheyHeld(t *testing.T) {
	node := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	ctx := context.Background()

	// A topic with one record, so fetches and pulls at its end park.
	cl, err := kgo.NewClient(kgo.SeedBrokers(node.KafkaAddr()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "abandon", Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	fetch := kmsg.NewPtrFetchRequest()
	fetch.Version, fetch.ReplicaID = 11, -1
	fetch.MaxWaitMillis, fetch.MinBytes, fetch.MaxBytes = math.MaxInt32, 1, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "abandon"
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes = 0, 1, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	fetch.Topics = append(fetch.Topics, ft)
	fetchFrame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("abandoner")).AppendRequest(nil, fetch, 1)

	pullFrame := protocol.AppendFrame(nil, &protocol.Command{Code: protocol.PullMessage, Language: "GO", Version: 317,
		Opaque: 1, ExtFields: protocol.FieldsOf(map[string]string{"consumerGroup": "abandoners", "topic": "abandon", "queueId": "0",
			"queueOffset": "1", "maxMsgNums": "32", "sysFlag": "6", "suspendTimeoutMillis": "60000",
			"subscription": "*", "expressionType": "TAG"})})

	// Requests begun and never finished, per listener.
	partial := map[string][]byte{
		node.KafkaAddr():    {0, 0, 0, 100, 0, 1},
		node.RemotingAddr(): {0, 0, 0, 100, 0, 0, 0},
		node.GRPCAddr():     []byte("PRI * HTTP/2.0\r\n"),
		node.HTTPAddr():     []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"),
	}

	var conns []net.Conn
	dial := func(addr string, first []byte) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(first); err != nil {
			t.Fatal(err)
		}
	}
	abandon := func() {
		for _, c := range conns {
			c.Close()
		}
		conns = conns[:0]
	}
	load := func(fetches, pulls, slow int) {
		for range fetches {
			dial(node.KafkaAddr(), fetchFrame)
		}
		for range pulls {
			dial(node.RemotingAddr(), pullFrame)
		}
		for addr, first := range partial {
			for range slow {
				dial(addr, first)
			}
		}
	}

	// One round first, so what the broker keeps for good (pools, a
	// group's state) is in the baseline.
	load(2, 2, 1)
	time.Sleep(300 * time.Millisecond)
	abandon()
	settled := func(g, f int) func() bool {
		return func() bool {
			runtime.GC()
			return runtime.NumGoroutine() <= g && openFDs(t) <= f
		}
	}
	time.Sleep(time.Second)
	baseG, baseF := runtime.NumGoroutine(), openFDs(t)

	load(40, 40, 10)
	apptest.Eventually(t, 10*time.Second, "the parked requests to hold goroutines", func() bool {
		return runtime.NumGoroutine() >= baseG+80
	})
	held := runtime.NumGoroutine()
	abandon()
	start := time.Now()
	apptest.Eventually(t, 10*time.Second, "goroutines and descriptors back to their count", settled(baseG+2, baseF))
	t.Logf("%d goroutines and %d descriptors before, %d goroutines while held, back in %v",
		baseG, baseF, held, time.Since(start).Round(time.Millisecond))
}
