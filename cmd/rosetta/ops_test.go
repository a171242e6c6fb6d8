package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// run runs one rosetta command line in-process against admin and returns
// its output and exit status.
func run(t *testing.T, adminURL string, args ...string) (string, int) {
	t.Helper()
	root := &cobra.Command{Use: "rosetta", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(topicCmd(), groupCmd(), messageCmd(), dlqCmd(), timerCmd(), txnCmd(), clusterCmd(), userCmd(), aclCmd(), quotaCmd(), storageCmd(), mqttCmd())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	usageErrors(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--admin", adminURL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		return out.String() + err.Error(), exitCode(err)
	}
	return out.String(), 0
}

// TestOperationsCommands: rosetta topic, group and message against a node
// holding franz-go records and a group's commits — tables, JSON and YAML,
// and the exit status scripts rely on.
func TestOperationsCommands(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	url := "http://" + n.HTTPAddr()
	if out, code := run(t, url, "topic", "create", "payments", "--queues", "2", "--retention-ms", "3600000"); code != 0 || !strings.Contains(out, "created payments with 2 queues") {
		t.Fatalf("topic create: %d %s", code, out)
	}
	// A single node has one group: nothing to move a queue to.
	if out, code := run(t, url, "topic", "move", "payments", "--queue", "1", "--to-group", "1"); code == 0 || !strings.Contains(out, "queues move between the groups of a cluster") {
		t.Fatalf("topic move on a single node: %d %s", code, out)
	}
	if out, code := run(t, url, "topic", "move", "payments"); code == 0 || !strings.Contains(out, "--queue") {
		t.Fatalf("topic move without --queue: %d %s", code, out)
	}
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("payments"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := 0; i < 10; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: int32(i % 2), Key: []byte(fmt.Sprintf("p%d", i)), Value: []byte(fmt.Sprintf("payment %d", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	// The group committed 2 of queue 0's 5.
	if out, code := run(t, url, "group", "reset", "ledger", "--topic", "payments", "--to-offset", "2", "--queues", "0"); code != 0 || !strings.Contains(out, "payments  0      -     2") {
		t.Fatalf("group reset: %d\n%s", code, out)
	}

	out, code := run(t, url, "topic", "list")
	if code != 0 || !strings.Contains(out, "TOPIC") || !strings.Contains(out, "payments  2       10") || !strings.Contains(out, "1h0m0s") {
		t.Errorf("topic list: %d\n%s", code, out)
	}
	out, code = run(t, url, "topic", "describe", "payments")
	if code != 0 || !strings.Contains(out, "QUEUE  GROUP  START  END  MESSAGES") || !strings.Contains(out, "1      0      0      5    5") {
		t.Errorf("topic describe: %d\n%s", code, out)
	}
	out, code = run(t, url, "topic", "describe", "payments", "-o", "json")
	var d apiv1.TopicDetail
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Messages != 10 {
		t.Errorf("topic describe -o json: %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "describe", "payments", "-o", "yaml"); code != 0 || !strings.Contains(out, "name: payments") {
		t.Errorf("topic describe -o yaml: %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "describe", "missing"); code != 3 || !strings.Contains(out, "topic_not_found") {
		t.Errorf("a missing topic: exit %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "describe"); code != 2 {
		t.Errorf("no topic named: exit %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "list", "--no-such-flag"); code != 2 {
		t.Errorf("an unknown flag: exit %d\n%s", code, out)
	}

	out, code = run(t, url, "group", "lag", "ledger")
	if code != 0 || !strings.Contains(out, "payments  0      2          5    3") || !strings.Contains(out, "total lag 3") {
		t.Errorf("group lag: %d\n%s", code, out)
	}
	if out, code = run(t, url, "group", "list"); code != 0 || !strings.Contains(out, "ledger         0        1       3") {
		t.Errorf("group list: %d\n%s", code, out)
	}
	out, code = run(t, url, "group", "reset", "ledger", "--to", "latest", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: nothing moved") || !strings.Contains(out, "payments  0      2     5") {
		t.Errorf("group reset --dry-run: %d\n%s", code, out)
	}
	if out, code = run(t, url, "group", "reset", "ledger"); code != 2 {
		t.Errorf("reset without a target: exit %d\n%s", code, out)
	}

	out, code = run(t, url, "message", "browse", "payments", "--queue", "1", "--limit", "2")
	if code != 0 || !strings.Contains(out, "p1") || !strings.Contains(out, "payment 3") || !strings.Contains(out, "next offset 2 of 5") {
		t.Errorf("message browse: %d\n%s", code, out)
	}
	out, code = run(t, url, "message", "tail", "payments", "--queue", "0", "--limit", "1")
	if code != 0 || !strings.Contains(out, "payment 8") || strings.Contains(out, "payment 6") {
		t.Errorf("message tail: %d\n%s", code, out)
	}
	if out, code = run(t, url, "message", "search", "--key", "nothing-has-this"); code != 3 {
		t.Errorf("search without hits: exit %d\n%s", code, out)
	}
	// Dead letters: two written as a broker would (origin in RETRY_TOPIC),
	// listed, browsed and one re-driven to its origin.
	if out, code = run(t, url, "topic", "create", "%DLQ%ledger", "--queues", "1"); code != 0 {
		t.Fatalf("create a dead-letter topic: %d\n%s", code, out)
	}
	for i := 0; i < 2; i++ {
		out, code = run(t, url, "message", "send", "%DLQ%ledger", "--header", "RETRY_TOPIC=payments", "--body", fmt.Sprintf("dead %d", i))
		if code != 0 || !strings.Contains(out, fmt.Sprintf("stored in %%DLQ%%ledger queue 0 at offset %d", i)) {
			t.Fatalf("message send: %d\n%s", code, out)
		}
	}
	if out, code = run(t, url, "dlq", "list"); code != 0 || !strings.Contains(out, "ledger  2") {
		t.Errorf("dlq list: %d\n%s", code, out)
	}
	if out, code = run(t, url, "dlq", "browse", "ledger"); code != 0 || !strings.Contains(out, "payments") || !strings.Contains(out, "dead 1") {
		t.Errorf("dlq browse: %d\n%s", code, out)
	}
	if out, code = run(t, url, "dlq", "redrive", "ledger", "--offsets", "1"); code != 0 || !strings.Contains(out, "re-drove 1; skipped 0") {
		t.Errorf("dlq redrive: %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "list"); code != 0 || !strings.Contains(out, "payments     2       11") {
		t.Errorf("after a re-drive: %d\n%s", code, out)
	}
	if out, code = run(t, url, "group", "delete", "ledger"); code != 0 {
		t.Errorf("group delete: %d\n%s", code, out)
	}
	if out, code = run(t, url, "topic", "delete", "payments"); code != 0 {
		t.Errorf("topic delete: %d\n%s", code, out)
	}
}

// TestTimerCommands: rosetta timer list and cancel, with the exit status
// scripts rely on (a pending timer is listed and cancelled in test/admin).
func TestTimerCommands(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	url := "http://" + n.HTTPAddr()
	if out, code := run(t, url, "timer", "list"); code != 0 || !strings.Contains(out, "DUE") {
		t.Fatalf("timer list: %d %s", code, out)
	}
	if out, code := run(t, url, "timer", "list", "-o", "json"); code != 0 || !strings.Contains(out, `"timers": []`) {
		t.Fatalf("timer list -o json: %d %s", code, out)
	}
	if out, code := run(t, url, "timer", "cancel", "C0A80001000000000000000000000001"); code != 2 {
		t.Fatalf("timer cancel without --topic: %d %s", code, out)
	}
	if out, code := run(t, url, "timer", "cancel", "C0A80001000000000000000000000001", "--topic", "nothing-here"); code != 3 {
		t.Fatalf("timer cancel of nothing pending: %d %s", code, out)
	}
}

// TestMessageTraceCommand: rosetta message trace by place on a traced
// topic, and its usage errors.
func TestMessageTraceCommand(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	url := "http://" + n.HTTPAddr()
	if out, code := run(t, url, "topic", "create", "audited", "--queues", "1"); code != 0 {
		t.Fatalf("topic create: %d %s", code, out)
	}
	if out, code := run(t, url, "topic", "alter", "audited", "--message-trace", "--queues", "2"); code != 0 || !strings.Contains(out, "2 queues, message trace true") {
		t.Fatalf("topic alter: %d %s", code, out)
	}
	if out, code := run(t, url, "topic", "alter", "audited"); code != 2 {
		t.Fatalf("topic alter without a setting: %d %s", code, out)
	}
	if out, code := run(t, url, "message", "send", "audited", "--queue", "0", "--body", "hello"); code != 0 {
		t.Fatalf("message send: %d %s", code, out)
	}
	apptest.Eventually(t, 10*time.Second, "the produced event", func() bool {
		out, code := run(t, url, "message", "trace", "--topic", "audited", "--queue", "0", "--offset", "0")
		return code == 0 && strings.Contains(out, "produced") && strings.Contains(out, "audited 0@0") && strings.Contains(out, "admin")
	})
	if out, code := run(t, url, "message", "trace"); code != 2 {
		t.Fatalf("trace without a message: %d %s", code, out)
	}
}

// TestMoreCommands: rosetta group describe, txn, cluster (node) status,
// user, acl and quota against a running node — tables where they have
// them, JSON, and the exit status of what is not there.
func TestMoreCommands(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	url := "http://" + n.HTTPAddr()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("ledger"), kgo.AllowAutoTopicCreation(),
		kgo.TransactionalID("ledger-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if out, code := run(t, url, "txn", "list"); code != 0 || !strings.Contains(out, "ledger-txn") || !strings.Contains(out, "Ongoing") {
		t.Fatalf("txn list: %d %s", code, out)
	}
	var tx apiv1.Transactions
	out, code := run(t, url, "txn", "list", "-o", "json")
	if err := json.Unmarshal([]byte(out), &tx); code != 0 || err != nil || len(tx.Kafka) != 1 || tx.Kafka[0].ID != "ledger-txn" {
		t.Fatalf("txn list -o json: %d %v %s", code, err, out)
	}
	if out, code := run(t, url, "txn", "abort", "ledger-txn"); code != 0 {
		t.Fatalf("txn abort: %d %s", code, out)
	}
	if out, code := run(t, url, "txn", "abort", "nobody"); code != 3 {
		t.Fatalf("txn abort of an unknown id: %d %s", code, out)
	}
	if out, code := run(t, url, "txn", "commit", "987654"); code != 3 {
		t.Fatalf("txn commit of no half message: %d %s", code, out)
	}
	if out, code := run(t, url, "txn", "rollback", "not-an-offset"); code != 2 {
		t.Fatalf("txn rollback of a bad offset: %d %s", code, out)
	}

	if out, code := run(t, url, "group", "reset", "auditors", "--topic", "ledger", "--to", "earliest"); code != 0 {
		t.Fatalf("group reset: %d %s", code, out)
	}
	if out, code := run(t, url, "group", "describe", "auditors"); code != 0 || !strings.Contains(out, "ledger") {
		t.Fatalf("group describe: %d %s", code, out)
	}
	var gd apiv1.GroupDetail
	out, code = run(t, url, "group", "describe", "auditors", "-o", "json")
	if err := json.Unmarshal([]byte(out), &gd); code != 0 || err != nil || gd.Name != "auditors" {
		t.Fatalf("group describe -o json: %d %v %s", code, err, out)
	}
	if out, code := run(t, url, "group", "describe", "nobody"); code != 3 {
		t.Fatalf("group describe of an unknown group: %d %s", code, out)
	}

	for _, cmd := range []string{"cluster", "node"} {
		if out, code := run(t, url, cmd, "status"); code != 0 || !strings.Contains(out, "node") {
			t.Fatalf("%s status: %d %s", cmd, code, out)
		}
		out, code := run(t, url, cmd, "status", "-o", "json")
		var v map[string]any
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || v["self"] == nil {
			t.Fatalf("%s status -o json: %d %v %s", cmd, code, err, out)
		}
	}

	if out, code := run(t, url, "user", "set", "alice", "--password", "alice-secret"); code != 0 || !strings.Contains(out, "SCRAM-SHA-256") {
		t.Fatalf("user set: %d %s", code, out)
	}
	if out, code := run(t, url, "user", "list"); code != 0 || !strings.Contains(out, `"alice"`) {
		t.Fatalf("user list: %d %s", code, out)
	}
	if out, code := run(t, url, "acl", "add", "--principal", "User:alice", "--resource-type", "topic", "--resource-name", "ledger",
		"--pattern", "literal", "--operation", "read", "--permission", "allow"); code != 0 {
		t.Fatalf("acl add: %d %s", code, out)
	}
	if out, code := run(t, url, "acl", "list", "--principal", "User:alice"); code != 0 || !strings.Contains(out, `"resourceName": "ledger"`) {
		t.Fatalf("acl list: %d %s", code, out)
	}
	if out, code := run(t, url, "acl", "add", "--principal", "User:alice", "--resource-type", "planet", "--resource-name", "x",
		"--operation", "read", "--permission", "allow"); code == 0 {
		t.Fatalf("acl add of a bad resource type: %d %s", code, out)
	}
	if out, code := run(t, url, "acl", "delete", "--principal", "User:alice"); code != 0 || !strings.Contains(out, "ledger") {
		t.Fatalf("acl delete: %d %s", code, out)
	}
	if out, code := run(t, url, "quota", "set", "tenant", "public", "--topics", "100"); code != 0 {
		t.Fatalf("quota set: %d %s", code, out)
	}
	if out, code := run(t, url, "quota", "list"); code != 0 || !strings.Contains(out, `"topics": 100`) {
		t.Fatalf("quota list: %d %s", code, out)
	}
	if out, code := run(t, url, "quota", "delete", "tenant", "public"); code != 0 {
		t.Fatalf("quota delete: %d %s", code, out)
	}
	if out, code := run(t, url, "user", "delete", "alice"); code != 0 {
		t.Fatalf("user delete: %d %s", code, out)
	}
	if out, code := run(t, url, "user", "delete", "alice"); code != 3 {
		t.Fatalf("user delete of nobody: %d %s", code, out)
	}
}

// TestUnknownSubcommands: an unknown subcommand exits with status 2 and
// the usage (scripts must not carry on); a grouping command alone prints
// its help.
func TestUnknownSubcommands(t *testing.T) {
	for _, args := range [][]string{{"cluster", "bogus"}, {"topic", "nope", "x"}, {"storage", "tier", "nope"}} {
		out, code := run(t, "http://127.0.0.1:1", args...)
		if code != 2 || !strings.Contains(out, "unknown command") || !strings.Contains(out, "Usage:") {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	if out, code := run(t, "http://127.0.0.1:1", "cluster"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Errorf("cluster alone: exit %d, %q", code, out)
	}
}
