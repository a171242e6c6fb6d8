// Package telemetry_test checks the broker's OpenTelemetry spans with a
// test OTLP/HTTP collector: a Kafka produce and a RocketMQ send join the
// traces their clients started (W3C traceparent as a record header and as
// a message property), and a fetch that returns records is traced.
package telemetry_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/twmb/franz-go/pkg/kgo"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// collector is a test OTLP/HTTP trace receiver.
type collector struct {
	url   string
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			c.spans = append(c.spans, ss.Spans...)
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// find returns the span named name, in traceID with parent (when given).
func (c *collector) find(name, traceID, parent string) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.Name == name && (traceID == "" || hex.EncodeToString(s.TraceId) == traceID) &&
			(parent == "" || hex.EncodeToString(s.ParentSpanId) == parent) {
			return s
		}
	}
	return nil
}

// linked returns the span named name that links to a span of traceID.
func (c *collector) linked(name, traceID string) *tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.spans {
		if s.Name != name {
			continue
		}
		for _, l := range s.Links {
			if hex.EncodeToString(l.TraceId) == traceID {
				return s
			}
		}
	}
	return nil
}

// newCollector starts a test collector until the test ends.
func newCollector(t *testing.T) *collector {
	c := &collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func TestSpansJoinClientTraces(t *testing.T) {
	rlog.SetLogLevel("error")
	col := newCollector(t)
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Telemetry.OTLPEndpoint = col.url
	cfg.Telemetry.BatchTimeout = 100 * time.Millisecond
	n := apptest.StartTestNode(t, cfg)
	ctx := context.Background()

	const kafkaTrace, kafkaParent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("traced"), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics("traced"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Value: []byte("order"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + kafkaTrace + "-" + kafkaParent + "-01")}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if fs := cl.PollFetches(fctx); len(fs.Records()) == 0 {
		t.Fatalf("nothing fetched: %v", fs.Errors())
	}
	cancel()

	const rmqTrace, rmqParent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{n.RemotingAddr()})),
		producer.WithGroupName("traced-pg"), producer.WithInstanceName("traced"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	m := primitive.NewMessage("traced-rmq", []byte("invoice"))
	m.WithProperty("traceparent", "00-"+rmqTrace+"-"+rmqParent+"-01")
	if _, err := p.SendSync(ctx, m); err != nil {
		t.Fatal(err)
	}

	apptest.Eventually(t, 15*time.Second, "the spans exported", func() bool {
		return col.find("produce traced", kafkaTrace, kafkaParent) != nil && col.find("send traced-rmq", rmqTrace, rmqParent) != nil &&
			col.find("fetch", "", "") != nil
	})
	s := col.find("produce traced", kafkaTrace, kafkaParent)
	if s.Kind != tracepb.Span_SPAN_KIND_SERVER || s.EndTimeUnixNano < s.StartTimeUnixNano {
		t.Errorf("produce span %v", s)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[a.Key] = a.Value.GetStringValue()
	}
	if attrs["messaging.system"] != "kafka" || attrs["messaging.destination.name"] != "traced" {
		t.Errorf("produce span attributes %v", attrs)
	}
}
