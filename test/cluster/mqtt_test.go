//go:build !race

package cluster_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// TestClusterMQTT: three members holding three replication groups serve
// MQTT clients; group 0's leader serves them (sessions, retained messages
// and the queues MQTT publishes go to are in group 0's log; the topic's
// other queues are read from their groups' leaders), the other members
// relay. A franz-go producer writes to all six partitions of the topic. A publisher at QoS 1 and 2 and a subscriber at QoS 2, both with
// persistent sessions and connected through the members not leading group
// 0, and a shared subscription of two clients keep going while the leader
// of group 0 — the topic's group — is SIGKILLed and restarted. The
// sessions resume at the next leader: every acknowledged publish reaches
// the subscriber (the QoS 2 ones never sent as new twice) and the shared
// subscription, every acknowledged Kafka record reaches the subscriber,
// the retained message survives, and franz-go reads every publish from the
// topic once.
func TestClusterMQTT(t *testing.T) {
	c := newCluster(t, envGroups+"=0", envMQTT+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.spreadTopic(ctx, t, "cl") // six partitions, two in each group
	kcl, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.DefaultProduceTopic("cl"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	url := func(id int) string {
		return "tcp://" + net.JoinHostPort(c.member(id).host, strconv.Itoa(c.ports[7]))
	}
	opts := func(id string, members ...int) *paho.ClientOptions {
		o := paho.NewClientOptions().SetClientID(id).SetCleanSession(false).
			SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).
			SetMaxReconnectInterval(500 * time.Millisecond).SetConnectTimeout(3 * time.Second).SetWriteTimeout(5 * time.Second)
		for _, m := range members {
			o.AddBroker(url(m))
		}
		return o
	}
	var mu sync.Mutex
	got := map[string]int{}   // the subscriber's deliveries
	fresh := map[string]int{} // those not marked DUP: sent as new
	sharedGot := map[string]int{}
	sub := paho.NewClient(opts("cl-sub", 2, 3, 1).SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		mu.Lock()
		got[string(m.Payload())]++
		if !m.Duplicate() {
			fresh[string(m.Payload())]++
		}
		mu.Unlock()
	}).SetOnConnectHandler(func(cl paho.Client) { cl.Subscribe("cl/#", 2, nil) }))
	mqttWait(t, sub.Connect(), "subscriber connects")
	defer sub.Disconnect(100)
	for i, m := range []int{3, 2} {
		sh := paho.NewClient(opts(fmt.Sprintf("cl-shared-%d", i), m, 1).SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			mu.Lock()
			sharedGot[string(m.Payload())]++
			mu.Unlock()
		}).SetOnConnectHandler(func(cl paho.Client) { cl.Subscribe("$share/workers/cl/#", 1, nil) }))
		mqttWait(t, sh.Connect(), "shared subscriber connects")
		defer sh.Disconnect(100)
	}
	time.Sleep(500 * time.Millisecond)
	pub := paho.NewClient(opts("cl-pub", 3, 2, 1))
	mqttWait(t, pub.Connect(), "publisher connects")
	defer pub.Disconnect(100)
	mqttWait(t, pub.Publish("cl/state", 1, true, "retained"), "retained publish")

	kl := startKafkaKeyedLoad(t, kcl)
	var acked sync.Map // payload → QoS
	var failed atomic.Int64
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
				tok := pub.Publish(fmt.Sprintf("cl/%d", i%4), qos, false, v)
				if tok.WaitTimeout(30*time.Second) && tok.Error() == nil {
					acked.Store(v, qos)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	count := func() int {
		n := 0
		acked.Range(func(any, any) bool { n++; return true })
		return n
	}
	more := func(what string, n int) {
		t.Helper()
		before, start := count(), time.Now()
		apptest.Eventually(t, 90*time.Second, what, func() bool { return count() >= before+n })
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
	}
	more("publishes acknowledged", 500)
	victim := c.member(1) // leads group 0: MQTT's and the topic's
	c.kill(victim)
	t.Logf("member %d killed after %d acknowledged publishes", victim.id, count())
	more("publishes acknowledged after the kill", 300)
	c.start(victim)
	c.wait(victim)
	back := time.Now()
	apptest.Eventually(t, 90*time.Second, "group 0 back at member 1", func() bool { return c.spread(ctx) })
	t.Logf("group 0 back at member 1 %v after its restart", time.Since(back).Round(time.Millisecond))
	more("publishes acknowledged after the restart", 300)
	close(stop)
	wg.Wait()
	kl.stop()
	stopped := time.Now()
	all := map[string]byte{}
	acked.Range(func(k, v any) bool { all[k.(string)] = v.(byte); return true })
	apptest.Eventually(t, 90*time.Second, "every acknowledged publish delivered to both subscriptions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range all {
			if got[v] == 0 || sharedGot[v] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("MQTT publishes delivered %v after the load stopped", time.Since(stopped).Round(time.Millisecond))
	// Kafka records of every group's partitions reach the MQTT
	// subscriber (at QoS 1).
	kafkaAcked := kl.acked()
	apptest.Eventually(t, 90*time.Second, "every acknowledged Kafka record delivered to the MQTT subscriber", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for v := range kafkaAcked {
			if got[v] == 0 {
				return false
			}
		}
		return true
	})

	t.Logf("Kafka records delivered %v after the load stopped", time.Since(stopped).Round(time.Millisecond))
	// franz-go reads what the topic holds (every publish, once).
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.seeds()...), kgo.ConsumeTopics("cl"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	stored := map[string]int{}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	for n := 0; n < len(all)+len(kafkaAcked)+1 && rctx.Err() == nil; {
		kc.PollFetches(rctx).EachRecord(func(r *kgo.Record) { stored[string(r.Value)]++; n++ })
	}
	rcancel()
	mu.Lock()
	dup1, dup2, resent, sentTwice, lost := 0, 0, 0, 0, 0
	for v, qos := range all {
		if stored[v] == 0 {
			lost++
		}
		switch {
		case got[v] > 1 && qos == 2:
			dup2++
		case got[v] > 1:
			dup1++
		}
		switch {
		case qos != 2:
		case stored[v] > 1:
			resent++ // the client published it twice (paho.mqtt.golang resends a PUBLISH after PUBREL)
		case fresh[v] > 1:
			sentTwice++
		}
	}
	mu.Unlock()
	t.Logf("%d acknowledged publishes (%d failed) and %d Kafka records (%d failed), all delivered; subscriber duplicates: %d at QoS 1, %d at QoS 2 (%d published twice by the client)",
		len(all), failed.Load(), len(kafkaAcked), kl.failed.Load(), dup1, dup2, resent)
	if lost > 0 {
		t.Fatalf("%d acknowledged publishes not in the topic", lost)
	}
	if sentTwice > 0 {
		t.Fatalf("%d stored QoS 2 messages sent to the subscriber as new more than once", sentTwice)
	}
	retained := make(chan paho.Message, 1)
	late := paho.NewClient(paho.NewClientOptions().AddBroker(url(2)).SetClientID("cl-late").SetAutoReconnect(false))
	mqttWait(t, late.Connect(), "connect")
	defer late.Disconnect(100)
	mqttWait(t, late.Subscribe("cl/state", 1, func(_ paho.Client, m paho.Message) { retained <- m }), "subscribe")
	select {
	case m := <-retained:
		if string(m.Payload()) != "retained" || !m.Retained() {
			t.Fatalf("retained after the kill: %q retained=%v", m.Payload(), m.Retained())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no retained message after the kill")
	}
}

// mqttWait waits for an MQTT token.
func mqttWait(t *testing.T, tok paho.Token, what string) {
	t.Helper()
	if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// mqttLoad is a QoS 1 publisher and a subscriber, both with persistent
// sessions, reconnecting through the addresses they were given.
type mqttLoad struct {
	pub, sub paho.Client
	mu       sync.Mutex
	acked    map[string]bool
	got      map[string]int
	stopCh   chan struct{}
	done     chan struct{}
}

// startMQTTLoad publishes to <prefix>/<n> (up to 500 a second) and
// subscribes to <prefix>/#.
func startMQTTLoad(t *testing.T, prefix string, urls ...string) *mqttLoad {
	t.Helper()
	opts := func(id string) *paho.ClientOptions {
		o := paho.NewClientOptions().SetClientID(id).SetCleanSession(false).
			SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).
			SetMaxReconnectInterval(500 * time.Millisecond).SetConnectTimeout(3 * time.Second).SetWriteTimeout(5 * time.Second)
		for _, u := range urls {
			o.AddBroker(u)
		}
		return o
	}
	l := &mqttLoad{acked: map[string]bool{}, got: map[string]int{}, stopCh: make(chan struct{}), done: make(chan struct{})}
	l.sub = paho.NewClient(opts(prefix + "-sub").SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
		l.mu.Lock()
		l.got[string(m.Payload())]++
		l.mu.Unlock()
	}).SetOnConnectHandler(func(cl paho.Client) { cl.Subscribe(prefix+"/#", 1, nil) }))
	mqttWait(t, l.sub.Connect(), "MQTT subscriber connects")
	time.Sleep(300 * time.Millisecond)
	l.pub = paho.NewClient(opts(prefix + "-pub"))
	mqttWait(t, l.pub.Connect(), "MQTT publisher connects")
	go func() {
		defer close(l.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stopCh:
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("%s-%d", prefix, i)
			tok := l.pub.Publish(fmt.Sprintf("%s/%d", prefix, i%5), 1, false, v)
			if tok.WaitTimeout(30*time.Second) && tok.Error() == nil {
				l.mu.Lock()
				l.acked[v] = true
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *mqttLoad) ackCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// stop ends the publishing.
func (l *mqttLoad) stop() {
	close(l.stopCh)
	<-l.done
}

// verify waits until the subscriber got every acknowledged publish, then
// disconnects both clients.
func (l *mqttLoad) verify(t *testing.T) {
	t.Helper()
	defer l.pub.Disconnect(100)
	defer l.sub.Disconnect(100)
	apptest.Eventually(t, 60*time.Second, "every acknowledged MQTT publish received", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for v := range l.acked {
			if l.got[v] == 0 {
				return false
			}
		}
		return true
	})
}
