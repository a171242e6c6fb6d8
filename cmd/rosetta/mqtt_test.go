package main

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestMQTTCommands: rosetta mqtt sessions and retained against a node an
// MQTT client is connected to.
func TestMQTTCommands(t *testing.T) {
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	url := "http://" + n.HTTPAddr()
	c := paho.NewClient(paho.NewClientOptions().AddBroker(n.MQTTURL()).SetClientID("cli-device").SetCleanSession(false).SetAutoReconnect(false))
	for _, do := range []func() paho.Token{c.Connect, func() paho.Token { return c.Subscribe("cli/#", 1, nil) },
		func() paho.Token { return c.Publish("cli/state", 1, true, "on") }} {
		if tok := do(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("mqtt client: %v", tok.Error())
		}
	}
	defer c.Disconnect(100)
	if out, code := run(t, url, "mqtt", "sessions"); code != 0 || !strings.Contains(out, "cli-device") || !strings.Contains(out, "cli/# (QoS 1)") ||
		!strings.Contains(out, "3.1.1") || !strings.Contains(out, "connected") {
		t.Fatalf("mqtt sessions: %d %s", code, out)
	}
	if out, code := run(t, url, "mqtt", "sessions", "-o", "json"); code != 0 || !strings.Contains(out, `"client_id": "cli-device"`) {
		t.Fatalf("mqtt sessions -o json: %d %s", code, out)
	}
	if out, code := run(t, url, "mqtt", "retained"); code != 0 || !strings.Contains(out, "cli/state") {
		t.Fatalf("mqtt retained: %d %s", code, out)
	}
}
