package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestGroupConfigs: the GROUP config resource (KIP-848's per-group
// settings): described with defaults for a group that does not exist,
// set and deleted with IncrementalAlterConfigs (validate-only changes
// nothing), bad names and values refused with INVALID_CONFIG, and a
// consumer group's own heartbeat interval told to its members.
func TestGroupConfigs(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	describe := func(group string) map[string]kmsg.DescribeConfigsResponseResourceConfig {
		t.Helper()
		req := kmsg.NewPtrDescribeConfigsRequest()
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
			t.Fatalf("describe group %s: %v %+v", group, err, resp)
		}
		out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range resp.Resources[0].Configs {
			out[c.Name] = c
		}
		return out
	}
	alter := func(group string, validateOnly bool, ops ...kmsg.IncrementalAlterConfigsRequestResourceConfig) (int16, string) {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validateOnly
		r := kmsg.NewIncrementalAlterConfigsRequestResource()
		r.ResourceType, r.ResourceName, r.Configs = kmsg.ConfigResourceTypeGroupConfig, group, ops
		req.Resources = append(req.Resources, r)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Resources) != 1 {
			t.Fatalf("alter group %s: %v %+v", group, err, resp)
		}
		msg := ""
		if m := resp.Resources[0].ErrorMessage; m != nil {
			msg = *m
		}
		return resp.Resources[0].ErrorCode, msg
	}
	set := func(name, value string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = name, kmsg.StringPtr(value), kmsg.IncrementalAlterConfigOpSet
		return c
	}
	del := func(name string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op = name, kmsg.IncrementalAlterConfigOpDelete
		return c
	}

	defaults := describe("never-seen")
	if c, ok := defaults["consumer.session.timeout.ms"]; !ok || *c.Value != "45000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("defaults: %+v", defaults)
	}
	for _, name := range []string{"share.record.lock.duration.ms", "share.delivery.count.limit", "share.auto.offset.reset", "share.isolation.level"} {
		if _, ok := defaults[name]; !ok {
			t.Fatalf("no %s among %v", name, defaults)
		}
	}
	if code, msg := alter("cfg-group", true, set("consumer.session.timeout.ms", "50000")); code != 0 {
		t.Fatalf("validate only: %d %s", code, msg)
	}
	if c := describe("cfg-group")["consumer.session.timeout.ms"]; *c.Value != "45000" {
		t.Fatalf("validate only stored %s", *c.Value)
	}
	if code, msg := alter("cfg-group", false, set("consumer.session.timeout.ms", "50000"), set("share.auto.offset.reset", "by_duration:PT1H30M")); code != 0 {
		t.Fatalf("set: %d %s", code, msg)
	}
	got := describe("cfg-group")
	if c := got["consumer.session.timeout.ms"]; *c.Value != "50000" || c.Source != kmsg.ConfigSourceGroupConfig {
		t.Fatalf("after set: %+v", c)
	}
	if c := got["share.auto.offset.reset"]; *c.Value != "by_duration:PT1H30M" {
		t.Fatalf("after set: %+v", c)
	}
	for _, bad := range []kmsg.IncrementalAlterConfigsRequestResourceConfig{
		set("consumer.session.timeout.ms", "1000"),   // below the broker's minimum
		set("consumer.heartbeat.interval.ms", "ten"), // not a number
		set("share.auto.offset.reset", "sideways"),   // not a strategy
		set("share.delivery.count.limit", "11"),      // above the maximum
		set("no.such.config", "1"),                   // unknown
	} {
		if code, msg := alter("cfg-group", false, bad); code != kerr.InvalidConfig.Code || msg == "" {
			t.Fatalf("%s=%s: %d %q, want INVALID_CONFIG", bad.Name, *bad.Value, code, msg)
		}
	}
	if code, msg := alter("cfg-group", false, del("consumer.session.timeout.ms")); code != 0 {
		t.Fatalf("delete: %d %s", code, msg)
	}
	if c := describe("cfg-group")["consumer.session.timeout.ms"]; *c.Value != "45000" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("after delete: %+v", c)
	}

	// A KIP-848 group's members are told the group's own interval (a
	// tenth of it while the group reconciles).
	if code, msg := alter("cfg-848", false, set("consumer.heartbeat.interval.ms", "7000")); code != 0 {
		t.Fatalf("set the heartbeat interval: %d %s", code, msg)
	}
	if _, err := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("cfg-topic"), kgo.AllowAutoTopicCreation()).
		ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).First(); err != nil {
		t.Fatal(err)
	}
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.RebalanceTimeoutMillis = "cfg-848", "member-cfg-1", 0, 30000
	hb.SubscribedTopicNames = []string{"cfg-topic"}
	hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	resp, err := hb.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("heartbeat: %v %+v", err, resp)
	}
	if resp.HeartbeatIntervalMillis != 7000 && resp.HeartbeatIntervalMillis != 700 {
		t.Fatalf("heartbeat interval %d ms, want the group's 7000 (or 700 while it reconciles)", resp.HeartbeatIntervalMillis)
	}
}
