package pulsar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// call makes an admin REST call and decodes a JSON answer into out.
func call(t testing.TB, n *apptest.TestNode, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+n.HTTPAddr()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

// TestAdminREST: a partitioned topic made over the REST API is one the
// clients see partitioned; tenants and namespaces are made and listed; a
// subscription is made, shows in stats with its backlog and consumers,
// is reset to the earliest message and deleted.
func TestAdminREST(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const base = "/admin/v2/persistent/acme/orders/events"
	if code := call(t, n, "PUT", "/admin/v2/tenants/acme", map[string]any{"allowedClusters": []string{"standalone"}}, nil); code != 204 {
		t.Fatalf("create tenant: %d", code)
	}
	if code := call(t, n, "PUT", "/admin/v2/namespaces/acme/orders", nil, nil); code != 204 {
		t.Fatalf("create namespace: %d", code)
	}
	if code := call(t, n, "PUT", "/admin/v2/namespaces/acme/orders", nil, nil); code != 409 {
		t.Fatalf("create the namespace again: %d, want 409", code)
	}
	var nss []string
	call(t, n, "GET", "/admin/v2/namespaces/acme", nil, &nss)
	if fmt.Sprint(nss) != "[acme/orders]" {
		t.Fatalf("namespaces %v", nss)
	}
	if code := call(t, n, "PUT", base+"/partitions", 3, nil); code != 204 {
		t.Fatalf("create partitioned topic: %d", code)
	}
	if code := call(t, n, "PUT", base+"/partitions", 3, nil); code != 409 {
		t.Fatalf("create it again: %d, want 409", code)
	}
	var meta struct{ Partitions int }
	call(t, n, "GET", base+"/partitions", nil, &meta)
	if meta.Partitions != 3 {
		t.Fatalf("partitions %d", meta.Partitions)
	}
	var topics []string
	call(t, n, "GET", "/admin/v2/persistent/acme/orders/partitioned", nil, &topics)
	if fmt.Sprint(topics) != "[persistent://acme/orders/events]" {
		t.Fatalf("partitioned topics %v", topics)
	}

	c := client(t, n)
	topic := "persistent://acme/orders/events"
	parts, err := c.TopicPartitions(topic)
	if err != nil || len(parts) != 3 {
		t.Fatalf("client sees partitions %v %v", parts, err)
	}
	if code := call(t, n, "PUT", base+"/subscription/audit", nil, nil); code != 204 {
		t.Fatalf("create subscription: %d", code)
	}
	produce(t, c, topic, "e", 30)
	var subs []string
	call(t, n, "GET", base+"/subscriptions", nil, &subs)
	if fmt.Sprint(subs) != "[audit]" {
		t.Fatalf("subscriptions %v", subs)
	}
	co, err := c.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "audit", Type: pulsar.Shared,
		Properties: map[string]string{"team": "billing"}})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	for range 30 {
		m := receive(t, co, 10*time.Second)
		_ = co.Ack(m)
	}
	var stats struct {
		MsgInCounter  int64 `json:"msgInCounter"`
		Subscriptions map[string]struct {
			MsgBacklog int64  `json:"msgBacklog"`
			Type       string `json:"type"`
			Consumers  []struct {
				Metadata map[string]string `json:"metadata"`
			} `json:"consumers"`
		} `json:"subscriptions"`
	}
	apptest.Eventually(t, 10*time.Second, "the backlog to drain", func() bool {
		call(t, n, "GET", base+"/partitioned-stats", nil, &stats)
		return stats.Subscriptions["audit"].MsgBacklog == 0
	})
	if s := stats.Subscriptions["audit"]; stats.MsgInCounter != 30 || s.Type != "Shared" || len(s.Consumers) != 3 ||
		s.Consumers[0].Metadata["team"] != "billing" {
		t.Fatalf("stats %+v", stats)
	}
	// Back to the start: every message again.
	if code := call(t, n, "POST", base+"/subscription/audit/resetcursor/0", nil, nil); code != 204 {
		t.Fatalf("reset cursor: %d", code)
	}
	got := map[string]bool{}
	for len(got) < 30 {
		m := receive(t, co, 10*time.Second)
		got[string(m.Payload())] = true
		_ = co.Ack(m)
	}
	co.Close()
	if code := call(t, n, "DELETE", base+"/subscription/audit", nil, nil); code != 204 {
		t.Fatalf("delete subscription: %d", code)
	}
	call(t, n, "GET", base+"/subscriptions", nil, &subs)
	if len(subs) != 0 {
		t.Fatalf("subscriptions after deleting: %v", subs)
	}
	// Peek an entry by its id, as pulsar-admin's get-message-by-id does.
	pc := client(t, n)
	pp, err := pc.CreateProducer(pulsar.ProducerOptions{Topic: "peeked", DisableBatching: true})
	if err != nil {
		t.Fatal(err)
	}
	id, err := pp.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("look"), Properties: map[string]string{"p": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	pp.Close()
	resp, err := http.Get(fmt.Sprintf("http://%s/admin/v2/persistent/public/default/peeked/ledger/%d/entry/%d", n.HTTPAddr(), id.LedgerID(), id.EntryID()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Pulsar-Num-Batch-Message") != "1" || !bytes.Contains(body, []byte("look")) ||
		resp.Header.Get("X-Pulsar-Message-ID") != fmt.Sprintf("%d:%d:-1", id.LedgerID(), id.EntryID()) {
		t.Fatalf("peek: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	var lookup map[string]string
	call(t, n, "GET", "/lookup/v2/topic/persistent/acme/orders/events", nil, &lookup)
	if lookup["brokerUrl"] != n.PulsarURL() {
		t.Fatalf("lookup %v", lookup)
	}
	if code := call(t, n, "DELETE", base+"/partitions?force=true", nil, nil); code != 204 {
		t.Fatalf("delete topic: %d", code)
	}
	if code := call(t, n, "GET", "/admin/v2/persistent/acme/orders/nope/stats", nil, nil); code != 404 {
		t.Fatalf("stats of an unknown topic: %d", code)
	}
	_ = context.Background()
}

// TestBatchAckAfterRedelivery: a consumer acknowledges a batch it
// received by the entry's id alone (as clients do once every message of
// it is acknowledged) after asking for a redelivery it had no permits
// for: the subscription takes the whole batch as acknowledged — not its
// first message alone, which would leave the others masked out of every
// redelivery and never acknowledged — and its backlog drains.
func TestBatchAckAfterRedelivery(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	c := client(t, n)
	const topic = "batch-ack-redelivery"
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, BatchingMaxMessages: 10, BatchingMaxPublishDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 10 {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprint(i))}, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, n)
	rc.connect(t)
	rc.write(t, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SUBSCRIBE.Enum(), Subscribe: &pulsarpb.CommandSubscribe{
		Topic: proto.String(topic), Subscription: proto.String("s"), SubType: pulsarpb.CommandSubscribe_Exclusive.Enum(),
		ConsumerId: proto.Uint64(1), RequestId: proto.Uint64(1), Durable: proto.Bool(true),
		InitialPosition: pulsarpb.CommandSubscribe_Earliest.Enum()}})
	if cmd := rc.read(t); cmd.GetType() != pulsarpb.BaseCommand_SUCCESS {
		t.Fatalf("subscribe: %v", cmd)
	}
	rc.write(t, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_FLOW.Enum(), Flow: &pulsarpb.CommandFlow{
		ConsumerId: proto.Uint64(1), MessagePermits: proto.Uint32(10)}})
	var id *pulsarpb.MessageIdData
	for id == nil {
		if f := rc.readFrame(t); f.Command.GetType() == pulsarpb.BaseCommand_MESSAGE {
			id = f.Command.GetMessage().GetMessageId()
		}
	}
	rc.write(t, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_REDELIVER_UNACKNOWLEDGED_MESSAGES.Enum(),
		RedeliverUnacknowledgedMessages: &pulsarpb.CommandRedeliverUnacknowledgedMessages{ConsumerId: proto.Uint64(1)}})
	rc.write(t, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_ACK.Enum(), Ack: &pulsarpb.CommandAck{
		ConsumerId: proto.Uint64(1), AckType: pulsarpb.CommandAck_Individual.Enum(),
		MessageId: []*pulsarpb.MessageIdData{{LedgerId: id.LedgerId, EntryId: id.EntryId}}}})
	apptest.Eventually(t, 10*time.Second, "the backlog to drain", func() bool {
		var st struct {
			Subscriptions map[string]struct {
				MsgBacklog int64 `json:"msgBacklog"`
			} `json:"subscriptions"`
		}
		call(t, n, "GET", "/admin/v2/persistent/public/default/"+topic+"/stats", nil, &st)
		return st.Subscriptions["s"].MsgBacklog == 0
	})
}
