package mqtt_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestTakeOverRace: clients of one identifier — persistent and clean
// sessions mixed, each subscribed — connect at once, over and over, so
// CONNECTs take the session from connections still connecting (a
// clean-start take-over mid-CONNECT once resumed a session on a nil
// connection and crashed the broker). The broker keeps serving: the last
// client's subscription gets what is published.
func TestTakeOverRace(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	for round := range 15 {
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := paho.NewClient(clientOpts(n, "contested", i%2 == 0).SetConnectTimeout(3 * time.Second))
				if tok := c.Connect(); tok.WaitTimeout(5*time.Second) && tok.Error() == nil {
					c.Subscribe("race/#", 1, nil).WaitTimeout(time.Second)
					c.Disconnect(0)
				}
			}()
		}
		wg.Wait()
		if round%5 == 4 {
			pub := client(t, n, fmt.Sprint("race-pub-", round), true)
			wait(t, pub.Publish("race/x", 1, false, "m"), "publish between rounds")
			pub.Disconnect(0)
		}
	}
	var box inbox
	sub := client(t, n, "contested", true)
	wait(t, sub.Subscribe("race/#", 1, box.handler), "subscribe")
	pub := client(t, n, "race-pub", true)
	wait(t, pub.Publish("race/last", 1, false, "last"), "publish")
	if m := box.waitFor(t, 1)[0]; string(m.Payload()) != "last" {
		t.Fatalf("after the take-overs: %q", m.Payload())
	}
}
