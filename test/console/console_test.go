// Package console_test drives the node's web console in a headless
// Chromium (chromedp): the pages render what the admin API holds, with no
// script error and nothing the content security policy refuses.
package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium not installed (scripts/test.sh installs it)")
	}
	t.Skip("chromium not installed")
	return ""
}

func post(t testing.TB, url string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		t.Fatalf("POST %s: %d", url, resp.StatusCode)
	}
}

// TestConsolePages: overview, topics, a topic's queues and messages, a
// message's detail, a group's lag, dead letters and search, timers,
// transactions, the cluster, users and ACLs, each rendered from the API
// without errors; a user made in the console authenticates a Kafka client.
func TestConsolePages(t *testing.T) {
	exe := chromium(t)
	cfg := apptest.TestConfig(t.TempDir())
	cfg.Listen.KafkaListeners = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
	n := apptest.StartTestNode(t, cfg)
	base := "http://" + n.HTTPAddr()
	post(t, base+"/api/v1/topics", map[string]any{"name": "orders", "queues": 2, "config": map[string]any{"message_trace": true}})
	for i := 0; i < 3; i++ {
		post(t, base+"/api/v1/topics/orders/messages", map[string]any{"queue": 0, "key": fmt.Sprintf("order-%d", i), "body": fmt.Sprintf(`{"order":%d}`, i),
			"headers": []map[string]string{{"key": "source", "value": "console-test"}}})
	}
	post(t, base+"/api/v1/groups/billing/reset", map[string]any{"topic": "orders", "to": "offset", "offset": 1})
	post(t, base+"/api/v1/topics/orders/messages", map[string]any{"queue": 1, "key": "later", "tags": "reminder", "body": "in an hour",
		"headers": []map[string]string{{"key": "TIMER_DELAY_SEC", "value": "3600"}}})

	br := openBrowser(t, exe, "console")
	do, shot, waitFor := br.do, br.shot, br.waitFor
	do("overview", chromedp.Navigate(base+"/"))
	overview := waitFor("total lag")
	shot("overview")
	do("topics", chromedp.Navigate(base+"/#/topics"))
	topics := waitFor("orders")
	shot("topics")
	br.click("open a topic", `//td[text()="orders"]`)
	topic := waitFor(`{"order":2}`)
	shot("topic")
	br.openModal("open a message", `//span[contains(text(), '{"order":1}')]`)
	detail := br.waitIn("modal-body", "produced")
	shot("message")
	do("close it", chromedp.Click(chromedp.ID("modal-close")))
	do("a group", chromedp.Navigate(base+"/#/groups/billing"))
	group := waitFor("total lag 2")
	shot("group")
	do("search", chromedp.Navigate(base+"/#/messages"), chromedp.WaitVisible(chromedp.CSS(`input[aria-label="key"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="key"]`), "order-2"), chromedp.Click(chromedp.CSS(`button[type="submit"]`)))
	search := waitFor(`{"order":2}`)
	shot("search")
	do("dead letters", chromedp.Navigate(base+"/#/dlq"))
	waitFor("nothing yet")
	shot("deadletters")
	do("transactions", chromedp.Navigate(base+"/#/transactions"))
	waitFor("RocketMQ half messages")
	shot("transactions")
	do("timers", chromedp.Navigate(base+"/#/timers"))
	timers := waitFor("reminder")
	shot("timers")
	device := paho.NewClient(paho.NewClientOptions().AddBroker(n.MQTTURL()).SetClientID("console-device").SetCleanSession(false).SetAutoReconnect(false))
	for _, step := range []func() paho.Token{device.Connect, func() paho.Token { return device.Subscribe("plant/#", 1, nil) },
		func() paho.Token { return device.Publish("plant/boiler", 1, true, "82C") }} {
		if tok := step(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("mqtt client: %v", tok.Error())
		}
	}
	defer device.Disconnect(100)
	do("mqtt", chromedp.Navigate(base+"/#/mqtt"))
	waitFor("console-device")
	mqttPage := waitFor("plant/boiler")
	shot("mqtt")
	do("cluster", chromedp.Navigate(base+"/#/cluster"))
	waitFor("Replication groups")
	shot("cluster")
	do("storage", chromedp.Navigate(base+"/#/storage"))
	waitFor("Tiered storage is off")
	do("users and ACLs", chromedp.Navigate(base+"/#/security"), chromedp.WaitVisible(chromedp.CSS(`input[aria-label="user name"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="user name"]`), "alice"),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="password"]`), "alice-secret"),
		chromedp.Click(chromedp.Search(`//button[text()='Create or set password']`)))
	waitFor("Saved alice")
	waitFor("SCRAM-SHA-256")
	do("add an ACL", chromedp.SendKeys(chromedp.CSS(`input[aria-label="principal"]`), "User:alice"),
		chromedp.SendKeys(chromedp.CSS(`input[aria-label="resource name"]`), "orders"),
		chromedp.Click(chromedp.Search(`//button[text()='Add ACL']`)))
	waitFor("Added the ACL")
	security := waitFor("topic orders")
	shot("security")
	// The credential the console made works for a Kafka client.
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.App.Addr("kafka/SASL_PLAINTEXT")), kgo.SASL(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.Ping(context.Background()); err != nil {
		t.Errorf("alice, made in the console, cannot authenticate: %v", err)
	}
	wrong, err := kgo.NewClient(kgo.SeedBrokers(n.App.Addr("kafka/SASL_PLAINTEXT")), kgo.SASL(scram.Auth{User: "alice", Pass: "guess"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if err := wrong.Ping(context.Background()); err == nil {
		t.Error("a wrong password authenticates")
	}
	for what, got := range map[string][]string{
		"overview": {overview, "topics", "total lag", "2"},
		"topics":   {topics, "orders", "3"},
		"topic":    {topic, "order-0", "queue 0"},
		"detail":   {detail, "console-test", "order-1", "produced", "admin"},
		"group":    {group, "orders", "total lag 2"},
		"search":   {search, "order-2"},
		"mqtt":     {mqttPage, "console-device", "plant/# (QoS 1)", "3.1.1", "Retained messages (1)"},
		"timers":   {timers, "orders", "later", "timer"},
		"security": {security, "alice", "SCRAM-SHA-512", "User:alice", "read", "allow"},
	} {
		for _, want := range got[1:] {
			if !strings.Contains(got[0], want) {
				t.Errorf("%s page lacks %q:\n%s", what, want, got[0])
			}
		}
	}
}
