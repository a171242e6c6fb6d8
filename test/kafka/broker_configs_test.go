package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestDynamicBrokerConfigs drives Kafka's dynamic broker configs (KIP-226)
// with kadm as librdkafka's admin test does: SET a node-only config on the
// node, SET and APPEND then DELETE and SUBTRACT cluster configs, refuse
// read-only configs, node-only configs at the cluster-wide default and bad
// values; describe them with their sources; a cluster-wide retention
// default applies at once (the topic's effective retention follows it).
func TestDynamicBrokerConfigs(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	str := func(s string) *string { return &s }
	alter := func(state bool, cfgs []kadm.AlterConfig, brokers ...int32) error {
		t.Helper()
		var resp kadm.AlterConfigsResponses
		var err error
		if state {
			resp, err = adm.AlterBrokerConfigsState(ctx, cfgs, brokers...)
		} else {
			resp, err = adm.AlterBrokerConfigs(ctx, cfgs, brokers...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(resp) != 1 {
			t.Fatalf("responses %+v", resp)
		}
		return resp[0].Err
	}
	describe := func(brokers ...int32) map[string]kadm.Config {
		t.Helper()
		rcs, err := adm.DescribeBrokerConfigs(ctx, brokers...)
		if err != nil || len(rcs) != 1 || rcs[0].Err != nil {
			t.Fatalf("describe %v: %+v %v", brokers, rcs, err)
		}
		out := map[string]kadm.Config{}
		for _, c := range rcs[0].Configs {
			out[c.Key] = c
		}
		return out
	}

	d := describe(1)
	if c := d["broker.id"]; c.MaybeValue() != "1" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Fatalf("broker.id %+v", c)
	}
	if c := d["log.retention.hours"]; c.MaybeValue() != "168" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("log.retention.hours %+v", c)
	}

	if err := alter(false, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "sasl.kerberos.min.time.before.relogin", Value: str("58000")}}, 1); err != nil {
		t.Fatalf("set a node config: %v", err)
	}
	if err := alter(false, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "background.threads", Value: str("9")},
		{Op: kadm.AppendConfig, Name: "log.cleanup.policy", Value: str("compact")}}, 1); err != nil {
		t.Fatalf("set and append: %v", err)
	}
	d = describe(1)
	if c := d["sasl.kerberos.min.time.before.relogin"]; c.MaybeValue() != "58000" || c.Source != kmsg.ConfigSourceDynamicBrokerConfig ||
		len(c.Synonyms) != 2 || c.Synonyms[1].Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("relogin %+v", c)
	}
	if c := d["log.cleanup.policy"]; c.MaybeValue() != "delete,compact" || c.Source != kmsg.ConfigSourceDynamicBrokerConfig {
		t.Fatalf("log.cleanup.policy %+v", c)
	}
	if err := alter(false, []kadm.AlterConfig{{Op: kadm.DeleteConfig, Name: "background.threads"},
		{Op: kadm.SubtractConfig, Name: "log.cleanup.policy", Value: str("compact")}}, 1); err != nil {
		t.Fatalf("delete and subtract: %v", err)
	}
	d = describe(1)
	if c := d["background.threads"]; c.MaybeValue() != "10" || c.Source != kmsg.ConfigSourceDefaultConfig {
		t.Fatalf("background.threads after delete %+v", c)
	}
	if c := d["log.cleanup.policy"]; c.MaybeValue() != "delete" {
		t.Fatalf("log.cleanup.policy after subtract %+v", c)
	}

	for _, tc := range []struct {
		what    string
		cfg     kadm.AlterConfig
		brokers []int32
		want    error
	}{
		{"a read-only config", kadm.AlterConfig{Name: "num.partitions", Value: str("3")}, []int32{1}, kerr.InvalidRequest},
		{"a node-only config at the cluster-wide default", kadm.AlterConfig{Name: "sasl.kerberos.min.time.before.relogin", Value: str("1")}, nil, kerr.InvalidRequest},
		{"a bad value", kadm.AlterConfig{Name: "log.retention.ms", Value: str("soon")}, []int32{1}, kerr.InvalidConfig},
	} {
		if err := alter(false, []kadm.AlterConfig{tc.cfg}, tc.brokers...); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.want)
		}
	}

	// The cluster-wide default: a non-incremental alter replaces the set.
	if err := alter(true, []kadm.AlterConfig{{Name: "log.retention.ms", Value: str("60000")}}); err != nil {
		t.Fatalf("cluster-wide retention: %v", err)
	}
	if d := describe(); len(d) != 1 || d["log.retention.ms"].Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Fatalf("cluster-wide defaults %+v", d)
	}
	if c := describe(1)["log.retention.ms"]; c.MaybeValue() != "60000" || c.Source != kmsg.ConfigSourceDynamicDefaultBrokerConfig {
		t.Fatalf("node's log.retention.ms %+v", c)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "dyn-retention"); err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "dyn-retention")
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On("dyn-retention", nil)
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.MaybeValue() != "60000" {
			t.Fatalf("the topic's retention.ms follows the broker default: %+v", c)
		}
	}
	if err := alter(true, nil); err != nil {
		t.Fatalf("clearing the cluster-wide defaults: %v", err)
	}
	if d := describe(); len(d) != 0 {
		t.Fatalf("cluster-wide defaults after clearing %+v", d)
	}
}
