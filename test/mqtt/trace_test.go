package mqtt_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/apiv1"
	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestMessageTrace: on a traced topic, an MQTT publish (QoS 1, and QoS 2
// of a persistent session) is recorded as produced by its client, and its
// deliveries to a subscriber and to a shared subscription's member as
// delivered (the member's acknowledgement as the POP engine's) — found by
// the message's place, as a Kafka record's.
func TestMessageTrace(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	base := "http://" + n.HTTPAddr()
	body, _ := json.Marshal(map[string]any{"name": "traced", "queues": 1, "config": map[string]any{"message_trace": true}})
	resp, err := http.Post(base+"/api/v1/topics", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create the traced topic: %v %v", err, resp)
	}
	resp.Body.Close()
	var plain, shared inbox
	sub := client(t, n, "trace-sub", true)
	wait(t, sub.Subscribe("traced/#", 1, plain.handler), "subscribe")
	member := client(t, n, "trace-member", true)
	wait(t, member.Subscribe("$share/audit/traced/#", 1, shared.handler), "shared subscribe")
	pub := client(t, n, "trace-pub", false)
	wait(t, pub.Publish("traced/a", 1, false, "one"), "QoS 1 publish")
	wait(t, pub.Publish("traced/a", 2, false, "two"), "QoS 2 publish")
	plain.waitFor(t, 2)
	shared.waitFor(t, 2)
	for offset, qos := range []int{1, 2} {
		apptest.Eventually(t, 20*time.Second, fmt.Sprintf("the QoS %d publish's events", qos), func() bool {
			var tr apiv1.MessageTrace
			r, err := http.Get(fmt.Sprintf("%s/api/v1/trace?topic=traced&queue=0&offset=%d", base, offset))
			if err != nil {
				return false
			}
			defer r.Body.Close()
			if json.NewDecoder(r.Body).Decode(&tr) != nil {
				return false
			}
			produced, toSub, toMember := false, false, false
			for _, ev := range tr.Events {
				switch {
				case ev.Kind == "produced" && ev.Protocol == "mqtt" && ev.Client == "trace-pub" && ev.Detail == fmt.Sprintf("traced/a QoS %d", qos):
					produced = true
				case ev.Kind == "delivered" && ev.Protocol == "mqtt" && ev.Client == "trace-sub" && ev.Group == "":
					toSub = true
				case ev.Kind == "delivered" && ev.Protocol == "mqtt" && ev.Client == "trace-member" && ev.Group == "$share/audit/traced/#" && ev.Attempt == 1:
					toMember = true
				}
			}
			return produced && toSub && toMember
		})
	}
}
