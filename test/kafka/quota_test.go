package kafka_test

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// throttleHook counts the throttles a franz-go client is told of.
type throttleHook struct{ n atomic.Int64 }

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.n.Add(1)
	}
}

// putJSON sends an admin API request and fails the test on an error status.
func putJSON(t *testing.T, method, url, body string) string {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
	}
	return string(b)
}

// TestQuotas: a tenant over its produce byte rate is throttled (the
// client is told throttle_time_ms and slows down) while another tenant's
// producer keeps its rate; a tenant over its storage quota and a
// namespace at its topic quota are refused with POLICY_VIOLATION and a
// message naming the quota; /metrics shows the quotas.
func TestQuotas(t *testing.T) {
	n := startNode(t)
	base := "http://" + n.HTTPAddr()
	putJSON(t, "PUT", base+"/api/v1/quotas/tenant/slowco", `{"produceBytesPerSecond": 262144}`)
	putJSON(t, "PUT", base+"/api/v1/quotas/tenant/smallco", `{"storageBytes": 100000}`)
	putJSON(t, "PUT", base+"/api/v1/quotas/namespace/public/few", `{"topics": 2}`)
	ctx := ctxTimeout(t, 2*time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	for _, topic := range []string{"slowco/app/orders", "fastco/app/orders", "smallco/app/orders"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}

	// Both producers write 8 KiB records as fast as they can for 6 s. A
	// throttled request is accepted and answered before the connection
	// waits (as on Kafka), so a short window sees up to one request and
	// one second of burst beyond the rate.
	value := make([]byte, 8<<10) // incompressible, and sent uncompressed: quotas count wire bytes
	_, _ = rand.Read(value)
	run := func(topic string, hook *throttleHook) int64 {
		cl := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.WithHooks(hook), kgo.ProducerLinger(0),
			kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(64<<10))
		var acked atomic.Int64
		deadline := time.Now().Add(6 * time.Second)
		var wg sync.WaitGroup
		for time.Now().Before(deadline) {
			wg.Add(1)
			cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
				if err == nil {
					acked.Add(int64(len(value)))
				}
				wg.Done()
			})
		}
		got := acked.Load() // what was acknowledged within the 6 s
		cl.PurgeTopicsFromClient(topic)
		wg.Wait()
		return got
	}
	var slowHook, fastHook throttleHook
	var slowBytes, fastBytes int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); slowBytes = run("slowco/app/orders", &slowHook) }()
	go func() { defer wg.Done(); fastBytes = run("fastco/app/orders", &fastHook) }()
	wg.Wait()
	t.Logf("6 s of produce: throttled tenant %d bytes (%d throttles), other tenant %d bytes (%d throttles)",
		slowBytes, slowHook.n.Load(), fastBytes, fastHook.n.Load())
	if slowHook.n.Load() == 0 || fastHook.n.Load() != 0 {
		t.Fatalf("throttles seen: over-quota client %d, other client %d", slowHook.n.Load(), fastHook.n.Load())
	}
	// 256 KiB/s for 6 s plus one second of burst, with slack.
	if slowBytes > 2*7*262144 {
		t.Fatalf("the throttled tenant wrote %d bytes in 6 s, over twice its quota", slowBytes)
	}
	if fastBytes < 3*slowBytes {
		t.Fatalf("the other tenant kept only %d bytes to the throttled %d", fastBytes, slowBytes)
	}

	// Storage: past 100,000 bytes the tenant's writes are refused.
	small := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("smallco/app/orders"))
	for range 15 {
		if err := small.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var refused error
	eventually(t, 10*time.Second, "the storage quota refuses writes", func() bool {
		refused = small.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr()
		return refused != nil
	})
	if !errors.Is(refused, kerr.PolicyViolation) {
		t.Fatalf("over the storage quota: %v", refused)
	}
	// The broker says which quota: the partition's error message.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "smallco/app/orders"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(-1, -1, -1, "over")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorMessage == nil || !strings.Contains(*p.ErrorMessage, "tenant:smallco") ||
		!strings.Contains(*p.ErrorMessage, "storage quota is 100000") {
		t.Fatalf("refusal message: %v", p.ErrorMessage)
	}
	// Topics: the third topic of a namespace limited to two is refused.
	for i, want := range []error{nil, nil, kerr.PolicyViolation} {
		resp, err := adm.CreateTopic(ctx, 1, 1, nil, fmt.Sprintf("few/t%d", i))
		if err == nil {
			err = resp.Err
		}
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("topic %d of 2: %v", i, err)
		}
	}
	metrics := putJSON(t, "GET", base+"/metrics", "")
	for _, want := range []string{`rosetta_quota_throttle_seconds_total{direction="produce",entity="tenant:slowco"}`,
		`rosetta_quota_limit{entity="tenant:smallco",quota="storage_bytes"} 100000`,
		`rosetta_quota_storage_bytes{entity="tenant:smallco"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if report := putJSON(t, "GET", base+"/api/v1/quotas", ""); !strings.Contains(report, `"entity":"tenant:slowco"`) {
		t.Errorf("quota report: %s", report)
	}
}

// TestKafkaUserQuotas: user quotas set with Kafka's AlterClientQuotas
// (kadm, as kafka-configs --entity-type users does) are described back
// and throttle that user's producer.
func TestKafkaUserQuotas(t *testing.T) {
	n := startSecureNode(t, nil)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(n.userClient(t, "admin"))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "uq"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:alice").AllowHosts().Topics("uq").
		Operations(kadm.OpWrite).ResourcePatternType(kadm.ACLPatternLiteral)); err != nil {
		t.Fatal(err)
	}
	alice := "alice"
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: []kadm.ClientQuotaEntityComponent{{Type: "user", Name: &alice}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 65536}},
	}})
	if err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("alter: %+v %v", res, err)
	}
	described, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: &alice}})
	if err != nil || len(described) != 1 || len(described[0].Values) != 1 || described[0].Values[0].Value != 65536 {
		t.Fatalf("describe: %+v %v", described, err)
	}
	var hook throttleHook
	value := make([]byte, 32<<10)
	_, _ = rand.Read(value)
	cl := n.userClient(t, "alice", kgo.DefaultProduceTopic("uq"), kgo.WithHooks(&hook), kgo.ProducerBatchCompression(kgo.NoCompression()))
	for range 8 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if hook.n.Load() == 0 {
		t.Fatal("256 KiB at 64 KiB/s was never throttled")
	}
}

// TestKafkaClientIDQuotas: client-id, user+client-id and default entities
// (kafka-configs --entity-type clients / --entity-default) set and described
// through kadm; a default client-id quota throttles an anonymous producer
// per client id while a named client id's own quota takes precedence.
func TestKafkaClientIDQuotas(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "cq"); err != nil {
		t.Fatal(err)
	}
	fast, alice := "fast-app", "alice"
	set := func(rate float64, comps ...kadm.ClientQuotaEntityComponent) {
		t.Helper()
		res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
			Entity: comps, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: rate}}}})
		if err != nil || len(res) != 1 || res[0].Err != nil {
			t.Fatalf("alter %+v: %+v %v", comps, res, err)
		}
	}
	set(32<<10, kadm.ClientQuotaEntityComponent{Type: "client-id"})             // the default client id
	set(1<<30, kadm.ClientQuotaEntityComponent{Type: "client-id", Name: &fast}) // one client id
	set(1000, kadm.ClientQuotaEntityComponent{Type: "user", Name: &alice},      // a user with
		kadm.ClientQuotaEntityComponent{Type: "client-id"}) // any client id
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: []kadm.ClientQuotaEntityComponent{{Type: "ip", Name: &fast}},
		Ops:    []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}}})
	if err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.InvalidRequest) {
		t.Fatalf("ip entity: %+v %v", res, err)
	}

	all, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("describe all: %+v %v", all, err)
	}
	defaults, err := adm.DescribeClientQuotas(ctx, true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 1}})
	if err != nil || len(defaults) != 1 || defaults[0].Entity[0].Name != nil || defaults[0].Values[0].Value != 32<<10 {
		t.Fatalf("describe the default client id (strict): %+v %v", defaults, err)
	}
	withUser, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: &alice}})
	if err != nil || len(withUser) != 1 || len(withUser[0].Entity) != 2 {
		t.Fatalf("describe alice's entities: %+v %v", withUser, err)
	}

	value := make([]byte, 32<<10)
	_, _ = rand.Read(value)
	produce := func(client string) int64 {
		var hook throttleHook
		cl := newClient(t, n.KafkaAddr(), kgo.ClientID(client), kgo.DefaultProduceTopic("cq"), kgo.WithHooks(&hook),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		for range 6 {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		return hook.n.Load()
	}
	if produce("some-app") == 0 {
		t.Fatal("192 KiB at the default client id's 32 KiB/s was never throttled")
	}
	if n := produce("fast-app"); n != 0 {
		t.Fatalf("a client id with its own 1 GiB/s quota was throttled %d times", n)
	}
}
