package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// MQTTOptions describe an MQTT workload driven with paho.mqtt.golang
// (3.1.1) against a running node (or any MQTT broker: mosquitto as a
// yardstick).
type MQTTOptions struct {
	Broker      string // tcp://host:port
	Topic       string
	Size        int
	Messages    int64
	QoS         byte
	Publishers  int
	Window      int // a publisher's publishes in flight
	Subscribers int // fan-out: subscribers of the topic
	Rate        int // messages/s (fan-out; 0: as fast as they go)
	Connections int // idle connections
	BrokerPID   int
}

func (o MQTTOptions) client(id string) (paho.Client, error) {
	c := paho.NewClient(paho.NewClientOptions().AddBroker(o.Broker).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(10 * time.Second).SetKeepAlive(time.Minute).SetOrderMatters(false).
		SetMessageChannelDepth(10_000))
	tok := c.Connect()
	if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("connect %s: %v", id, tok.Error())
	}
	return c, nil
}

// MQTTPublish publishes from several clients, each with a window of
// publishes in flight, and reports throughput, the latency from publish
// to acknowledgement (QoS 1 and 2; QoS 0: to the write) and CPU.
func MQTTPublish(ctx context.Context, o MQTTOptions) (*Report, error) {
	o.Publishers, o.Window = max(o.Publishers, 1), max(o.Window, 1)
	clients := make([]paho.Client, o.Publishers)
	for i := range clients {
		c, err := o.client(fmt.Sprintf("bench-pub-%d", i))
		if err != nil {
			return nil, err
		}
		defer c.Disconnect(100)
		clients[i] = c
	}
	body := make([]byte, o.Size)
	_, _ = rand.Read(body)
	if tok := clients[0].Publish(o.Topic+"/warm", 1, false, body); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		return nil, fmt.Errorf("warm-up publish: %v", tok.Error()) // the topic is made
	}
	per := o.Messages / int64(o.Publishers)
	lats := make([][]time.Duration, o.Publishers)
	var failed atomic.Value
	var wg sync.WaitGroup
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			window := make(chan struct{}, o.Window)
			var inner sync.WaitGroup
			var mu sync.Mutex
			for n := int64(0); n < per && failed.Load() == nil && ctx.Err() == nil; n++ {
				window <- struct{}{}
				t0 := time.Now()
				tok := c.Publish(fmt.Sprintf("%s/%d", o.Topic, n%16), o.QoS, false, body)
				inner.Add(1)
				go func() {
					defer inner.Done()
					defer func() { <-window }()
					tok.Wait()
					if err := tok.Error(); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
					d := time.Since(t0)
					mu.Lock()
					lats[i] = append(lats[i], d)
					mu.Unlock()
				}()
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	r := opsReport(fmt.Sprintf("mqtt publish: %d B messages at QoS %d, %d publishers, %d in flight each", o.Size, o.QoS, o.Publishers, o.Window),
		all, o.Size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: publish to acknowledgement; cpu: load generator)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// MQTTFanout publishes to a topic many subscribers share (each gets every
// message) and reports deliveries per second, the latency from publish to
// delivery and the broker's CPU per delivery.
func MQTTFanout(ctx context.Context, o MQTTOptions) (*Report, error) {
	o.Subscribers = max(o.Subscribers, 1)
	var delivered atomic.Int64
	want := o.Messages * int64(o.Subscribers)
	done := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var lats []time.Duration
	for i := range o.Subscribers {
		c, err := o.client(fmt.Sprintf("bench-sub-%d", i))
		if err != nil {
			return nil, err
		}
		defer c.Disconnect(100)
		tok := c.Subscribe(o.Topic+"/#", o.QoS, func(_ paho.Client, m paho.Message) {
			if p := m.Payload(); len(p) >= 8 && i%16 == 0 { // latencies from a sixteenth of the subscribers
				d := time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(p))))
				mu.Lock()
				lats = append(lats, d)
				mu.Unlock()
			}
			if delivered.Add(1) == want {
				once.Do(func() { close(done) })
			}
		})
		if !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
			return nil, fmt.Errorf("subscribe: %v", tok.Error())
		}
	}
	pub, err := o.client("bench-fanout-pub")
	if err != nil {
		return nil, err
	}
	defer pub.Disconnect(100)
	body := make([]byte, max(o.Size, 8))
	var tick <-chan time.Time
	if o.Rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(o.Rate))
		defer t.Stop()
		tick = t.C
	}
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	for n := int64(0); n < o.Messages && ctx.Err() == nil; n++ {
		if tick != nil {
			<-tick
		}
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
		tok := pub.Publish(o.Topic+"/fan", o.QoS, false, append([]byte(nil), body...))
		if o.QoS > 0 && n%64 == 63 {
			tok.Wait()
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("%d of %d deliveries after two minutes", delivered.Load(), want)
	}
	el := time.Since(start)
	r := opsReport(fmt.Sprintf("mqtt fan-out: %d B messages at QoS %d to %d subscribers", o.Size, o.QoS, o.Subscribers), lats, o.Size, el, cpu0)
	r.Records, r.Messages, r.Bytes = o.Messages, o.Messages, o.Messages*int64(len(body))
	r.Extra = append(r.Extra, fmt.Sprintf("deliveries     %d (%.0f/s)", want, float64(want)/el.Seconds()),
		"(latency: publish to delivery; msgs/s and cpu above count published messages)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	if o.BrokerPID > 0 {
		r.Extra = append(r.Extra, fmt.Sprintf("broker cpu     %.3f CPU-s per million deliveries", (procCPU(o.BrokerPID)-bcpu0).Seconds()/float64(want)*1e6))
	}
	return r, nil
}

// MQTTIdle opens idle connections (CONNECT, then only keep-alives) and
// reports the broker's resident memory per connection.
func MQTTIdle(ctx context.Context, o MQTTOptions) (*Report, error) {
	addr := o.Broker
	if len(addr) > 6 && addr[:6] == "tcp://" {
		addr = addr[6:]
	}
	rss0 := procRSS(o.BrokerPID)
	conns := make([]net.Conn, 0, o.Connections)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// A loopback broker takes connections from 127.0.0.1, .2, ... (20,000
	// each): one source address has too few ephemeral ports for 100,000.
	host, _, _ := net.SplitHostPort(addr)
	loopback := net.ParseIP(host).IsLoopback() || host == "localhost"
	start := time.Now()
	for i := range o.Connections {
		if ctx.Err() != nil {
			break
		}
		d := net.Dialer{Timeout: 10 * time.Second}
		if loopback && i >= 20_000 {
			d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i/20_000))}
			d.Control = bindAddressNoPort
		}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		id := fmt.Sprintf("idle-%d", i)
		// CONNECT, 3.1.1, clean session, keep alive 300 s.
		pkt := []byte{0x10, byte(10 + 2 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 1, 44, 0, byte(len(id))}
		if _, err := c.Write(append(pkt, id...)); err != nil {
			return nil, err
		}
		ack := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(ack); err != nil || ack[0] != 0x20 {
			return nil, fmt.Errorf("connection %d: no CONNACK: %v", i, err)
		}
		conns = append(conns, c)
	}
	el := time.Since(start)
	time.Sleep(2 * time.Second) // (the broker settles)
	rss1 := procRSS(o.BrokerPID)
	r := &Report{Name: fmt.Sprintf("mqtt idle connections: %d", len(conns)), Elapsed: el}
	r.Extra = append(r.Extra, fmt.Sprintf("connections    %d opened in %v", len(conns), el.Round(time.Millisecond)))
	if o.BrokerPID > 0 {
		per := float64(rss1-rss0) / float64(max(len(conns), 1))
		r.Extra = append(r.Extra, fmt.Sprintf("broker rss     %.1f MiB before, %.1f MiB after: %.1f KiB per connection",
			float64(rss0)/(1<<20), float64(rss1)/(1<<20), per/1024))
	}
	return r, nil
}

// bindAddressNoPort lets a socket bound to a source address take its port
// at connect (IP_BIND_ADDRESS_NO_PORT), so ports in TIME_WAIT towards
// another destination do not collide.
func bindAddressNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, ipBindAddressNoPort, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// ipBindAddressNoPort is Linux's IP_BIND_ADDRESS_NO_PORT.
const ipBindAddressNoPort = 24
