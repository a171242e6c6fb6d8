package mqtt_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

const (
	crashDirEnv  = "ROSETTA_MQTT_CRASH_DIR"
	crashAddrEnv = "ROSETTA_MQTT_CRASH_ADDR"
)

// TestMQTTCrashChild runs a node for TestMQTTCrash until killed.
func TestMQTTCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("run by TestMQTTCrash")
	}
	cfg := apptest.TestConfig(dir)
	cfg.Storage.Durability = "sync"
	cfg.Listen.HTTP, cfg.Listen.Remoting, cfg.Listen.GRPC, cfg.Listen.Pulsar, cfg.Listen.PulsarSSL, cfg.Listen.MQTTSSL = "", "", "", "", "", ""
	cfg.Listen.MQTT = os.Getenv(crashAddrEnv)
	n := apptest.StartTestNode(t, cfg)
	fmt.Printf("ADDRS=%s\n", n.KafkaAddr())
	select {}
}

// TestMQTTCrash: publishers at QoS 1 and QoS 2 and a subscriber with a
// persistent session (clean session off, QoS 2) keep going while the broker
// is SIGKILLed three times and restarted; the clients reconnect to their
// sessions. Every acknowledged publish reaches the subscriber, the QoS 1
// ones at least once and the QoS 2 ones exactly once; the retained message
// survives, and so does the will of a client connected at the first kill.
func TestMQTTCrash(t *testing.T) {
	if os.Getenv(crashDirEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var kafkaAddr string
	start := func() *exec.Cmd {
		cmd, ka := apptest.StartChild(t, "TestMQTTCrashChild", []string{crashDirEnv + "=" + dir, crashAddrEnv + "=" + addr}, "ADDRS=")
		kafkaAddr = ka
		return cmd
	}
	cmd := start()
	defer func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() }()

	opts := func(id string) *paho.ClientOptions {
		return paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID(id).SetCleanSession(false).
			SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(100 * time.Millisecond).
			SetMaxReconnectInterval(200 * time.Millisecond).SetConnectTimeout(2 * time.Second).SetWriteTimeout(5 * time.Second)
	}
	var mu sync.Mutex
	got := map[string]int{}   // deliveries
	fresh := map[string]int{} // deliveries not marked DUP: the broker sent the message as new
	subOpts := opts("crash-sub").SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got[string(m.Payload())]++
		if !m.Duplicate() {
			fresh[string(m.Payload())]++
		}
		mu.Unlock()
	}).SetOnConnectHandler(func(c paho.Client) {
		c.Subscribe("crash/#", 2, nil) // (the session keeps it; again for the first connection)
	})
	sub := paho.NewClient(subOpts)
	wait(t, sub.Connect(), "subscriber connects")
	defer sub.Disconnect(100)
	time.Sleep(300 * time.Millisecond)
	pub := paho.NewClient(opts("crash-pub"))
	wait(t, pub.Connect(), "publisher connects")
	defer pub.Disconnect(100)
	wait(t, pub.Publish("crash/state", 1, true, "retained"), "retained publish")

	// A client with a will, connected when the broker is killed (its
	// will goes when the broker is back), and one that disconnected
	// before (none).
	willOpts := func(id, payload string) *paho.ClientOptions {
		return paho.NewClientOptions().AddBroker("tcp://"+addr).SetClientID(id).SetAutoReconnect(false).SetConnectRetry(false).
			SetWill("crash/will", payload, 1, false)
	}
	willer := paho.NewClient(willOpts("crash-willer", "willer gone"))
	wait(t, willer.Connect(), "client with a will connects")
	polite := paho.NewClient(willOpts("crash-polite", "polite gone"))
	wait(t, polite.Connect(), "polite client connects")
	polite.Disconnect(100)

	var acked sync.Map // payload → QoS
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, qos := range []byte{1, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := fmt.Sprintf("q%d-%d", qos, i)
				tok := pub.Publish(fmt.Sprintf("crash/%d", i%4), qos, false, v)
				if tok.WaitTimeout(20*time.Second) && tok.Error() == nil {
					acked.Store(v, qos)
				}
			}
		}()
	}
	count := func() int {
		n := 0
		acked.Range(func(any, any) bool { n++; return true })
		return n
	}
	for kill := range 3 {
		before := count()
		apptest.Eventually(t, 30*time.Second, "publishes acknowledged", func() bool { return count() >= before+300 })
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		t.Logf("kill %d after %d acknowledged publishes", kill+1, count())
		cmd = start()
	}
	before := count()
	apptest.Eventually(t, 30*time.Second, "publishes after the last restart", func() bool { return count() >= before+300 })
	close(stop)
	wg.Wait()
	all := map[string]byte{}
	acked.Range(func(k, v any) bool { all[k.(string)] = v.(byte); return true })
	apptest.Eventually(t, 60*time.Second, "every acknowledged publish delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range all {
			if got[v] == 0 {
				return false
			}
		}
		return true
	})
	apptest.Eventually(t, 30*time.Second, "the will of the client connected at the first kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["willer gone"] > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got["polite gone"] > 0 {
		t.Fatal("the will of a client that disconnected was sent")
	}
	// What the topic holds: a QoS 2 publish stored twice was sent twice by
	// the publisher as new — paho.mqtt.golang keeps a QoS 2 PUBLISH, not
	// the PUBREL that followed its PUBREC, so after a reconnect it sends
	// the PUBLISH again (DUP) although the broker released the packet
	// identifier, which the specification says starts a new message.
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("crash"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	stored := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	for n := 0; n < len(all)+1 && ctx.Err() == nil; {
		kc.PollFetches(ctx).EachRecord(func(r *kgo.Record) { stored[string(r.Value)]++; n++ })
	}
	cancel()
	dup1, dup2, resent, sentTwice := 0, 0, 0, 0
	for v, n := range got {
		switch {
		case n > 1 && all[v] == 2:
			dup2++
		case n > 1:
			dup1++
		}
		if all[v] != 2 {
			continue
		}
		switch {
		case stored[v] > 1:
			resent++
		case fresh[v] > 1:
			sentTwice++ // the broker sent one stored message as new twice
		}
	}
	t.Logf("%d acknowledged publishes delivered; duplicates: %d at QoS 1, %d at QoS 2 (%d of them published twice by the client after PUBREL, the others sent again with DUP set)",
		len(all), dup1, dup2, resent)
	if sentTwice > 0 {
		t.Fatalf("%d stored QoS 2 messages sent as new more than once", sentTwice)
	}
	var retained inbox
	late := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("late").SetAutoReconnect(false))
	wait(t, late.Connect(), "connect")
	defer late.Disconnect(100)
	wait(t, late.Subscribe("crash/state", 1, retained.handler), "subscribe")
	if m := retained.waitFor(t, 1)[0]; string(m.Payload()) != "retained" || !m.Retained() {
		t.Fatalf("retained after the kills: %q retained=%v", m.Payload(), m.Retained())
	}
}
