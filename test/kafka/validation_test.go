package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type createCase struct {
	name    string
	parts   int32
	rf      int16
	configs map[string]string
	want    *kerr.Error
}

// TestCreateTopicsValidation: every invalid CreateTopics case gets Kafka's
// code, with and without validate_only, and valid neighbours in the same
// request still succeed.
func TestCreateTopicsValidation(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	cases := []createCase{
		{"cv-unknown-config", 1, 1, map[string]string{"no.such.config": "1"}, kerr.InvalidConfig},
		{"cv-bad-long", 1, 1, map[string]string{"retention.ms": "soon"}, kerr.InvalidConfig},
		{"cv-bad-min-isr", 1, 1, map[string]string{"min.insync.replicas": "0"}, kerr.InvalidConfig},
		{"cv-bad-bool", 1, 1, map[string]string{"preallocate": "maybe"}, kerr.InvalidConfig},
		{"cv-bad-ratio", 1, 1, map[string]string{"min.cleanable.dirty.ratio": "1.5"}, kerr.InvalidConfig},
		{"cv-bad-policy", 1, 1, map[string]string{"cleanup.policy": "shred"}, kerr.InvalidConfig},
		{"cv-bad-compression", 1, 1, map[string]string{"compression.type": "brotli"}, kerr.InvalidConfig},
		{"cv-zero-partitions", 0, 1, nil, kerr.InvalidPartitions},
		{"cv-minus2-partitions", -2, 1, nil, kerr.InvalidPartitions},
		{"cv-zero-rf", 1, 0, nil, kerr.InvalidReplicationFactor},
		{"cv-minus2-rf", 1, -2, nil, kerr.InvalidReplicationFactor},
		{"cv bad", 1, 1, nil, kerr.InvalidTopicException},
		{"cv%bad", 1, 1, nil, kerr.InvalidTopicException},
		{strings.Repeat("x", 250), 1, 1, nil, kerr.InvalidTopicException},
		{".", 1, 1, nil, kerr.InvalidTopicException},
		{"..", 1, 1, nil, kerr.InvalidTopicException},
		{"cv-ok-unenforced", 3, 3, map[string]string{"segment.bytes": "1048576", "min.insync.replicas": "2", "compression.type": "zstd"}, nil},
		{"cv-ok-default", -1, -1, nil, nil},
	}
	for _, validateOnly := range []bool{true, false} {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.ValidateOnly = validateOnly
		req.TimeoutMillis = 5000
		for _, c := range cases {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = c.name, c.parts, c.rf
			for k, v := range c.configs {
				cfg := kmsg.NewCreateTopicsRequestTopicConfig()
				cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
				rt.Configs = append(rt.Configs, cfg)
			}
			req.Topics = append(req.Topics, rt)
		}
		// The same name twice: INVALID_REQUEST, answered once.
		for i := 0; i < 2; i++ {
			rt := kmsg.NewCreateTopicsRequestTopic()
			rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "cv-twice", 1, 1
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int16{}
		for _, rt := range resp.Topics {
			if _, dup := got[rt.Topic]; dup {
				t.Fatalf("topic %q answered twice", rt.Topic)
			}
			got[rt.Topic] = rt.ErrorCode
		}
		for _, c := range cases {
			want := int16(0)
			if c.want != nil {
				want = c.want.Code
			}
			if got[c.name] != want {
				t.Fatalf("validate_only=%v %q: code %d, want %d", validateOnly, c.name, got[c.name], want)
			}
		}
		if got["cv-twice"] != kerr.InvalidRequest.Code {
			t.Fatalf("validate_only=%v: duplicate name got code %d", validateOnly, got["cv-twice"])
		}
	}
	// The unenforced configs are stored and described.
	adm := kadm.NewClient(cl)
	rcs, err := adm.DescribeTopicConfigs(ctx, "cv-ok-unenforced")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("cv-ok-unenforced", nil)
	found := false
	for _, c := range rc.Configs {
		if c.Key == "segment.bytes" && c.MaybeValue() == "1048576" {
			found = true
		}
	}
	if !found {
		t.Fatalf("segment.bytes not described: %+v", rc.Configs)
	}
}

// TestAlterConfigsValidation: unknown names and unparsable values are
// INVALID_CONFIG for both alter APIs, validate_only or not; nothing changes.
func TestAlterConfigsValidation(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "av"); err != nil {
		t.Fatal(err)
	}
	bad := []kadm.AlterConfig{
		{Name: "no.such.config", Value: kmsg.StringPtr("1")},
		{Name: "retention.ms", Value: kmsg.StringPtr("x")},
		{Name: "segment.bytes", Value: kmsg.StringPtr("-5")},
	}
	for _, validate := range []bool{true, false} {
		for _, c := range bad {
			alter := adm.AlterTopicConfigs
			if validate {
				alter = adm.ValidateAlterTopicConfigs
			}
			res, err := alter(ctx, []kadm.AlterConfig{c}, "av")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := res.On("av", nil); r.Err != kerr.InvalidConfig {
				t.Fatalf("incremental %s=%v validate=%v: %v, want INVALID_CONFIG", c.Name, *c.Value, validate, r.Err)
			}
			res, err = adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{c}, "av")
			if err != nil {
				t.Fatal(err)
			}
			if r, _ := res.On("av", nil); r.Err != kerr.InvalidConfig {
				t.Fatalf("alter %s: %v, want INVALID_CONFIG", c.Name, r.Err)
			}
		}
	}
	res, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "flush.ms", Value: kmsg.StringPtr("1000")}}, "av")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := res.On("av", nil); r.Err != nil {
		t.Fatalf("known unenforced config refused: %v", r.Err)
	}
}

// TestGroupSessionTimeoutBounds: a JoinGroup asking for a session timeout
// below group.min.session.timeout.ms (6 s) is INVALID_SESSION_TIMEOUT.
func TestGroupSessionTimeoutBounds(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	for _, c := range []struct {
		ms   int32
		want int16
	}{{3000, kerr.InvalidSessionTimeout.Code}, {31 * 60 * 1000, kerr.InvalidSessionTimeout.Code}} {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = "bounds", c.ms, 10000
		req.ProtocolType = "consumer"
		req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 0}}}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != c.want {
			t.Fatalf("session timeout %d ms: code %d, want %d", c.ms, resp.ErrorCode, c.want)
		}
	}
}

// TestInternalTopicsListed: a Metadata request for all topics lists
// __consumer_offsets flagged internal; producing to it is refused.
func TestInternalTopicsListed(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	cl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "plain"); err != nil {
		t.Fatal(err)
	}
	all, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := all["__consumer_offsets"]; !ok || !d.IsInternal {
		t.Fatalf("__consumer_offsets not listed internal: %+v", all.Names())
	}
	user, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := user["__consumer_offsets"]; ok || !user.Has("plain") {
		t.Fatalf("user topics: %v", user.Names())
	}
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("__consumer_offsets"), kgo.RecordRetries(1))
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("produce to __consumer_offsets accepted")
	}
	// Its records and settings are the broker's own: no grow, trim,
	// reconfigure or delete.
	if r, err := adm.CreatePartitions(ctx, 2, "__consumer_offsets"); err != nil || r["__consumer_offsets"].Err == nil {
		t.Fatalf("grow __consumer_offsets: %v %v", r, err)
	}
	if r, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("1")}}, "__consumer_offsets"); err != nil || r[0].Err == nil {
		t.Fatalf("reconfigure __consumer_offsets: %v %v", r, err)
	}
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "__consumer_offsets", Partition: 0, At: 1})
	if r, err := adm.DeleteRecords(ctx, os); err != nil || r.Error() == nil {
		t.Fatalf("trim __consumer_offsets: %v %v", r, err)
	}
	if r, err := adm.DeleteTopics(ctx, "__consumer_offsets"); err != nil || r.Error() == nil {
		t.Fatalf("delete __consumer_offsets: %v %v", r, err)
	}
}
