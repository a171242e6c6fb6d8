package mqtt_test

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
)

// TestSharedSubscription: a member of $share/workers/jobs/# takes the
// messages (within its window), the other member gets none of them while
// it holds them; when its connection ends holding messages it never
// acknowledged, they are not lost: the other member gets them.
func TestSharedSubscription(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	const filter, total = "$share/workers/jobs/#", 40

	// Member a: a raw client that takes messages and never acknowledges.
	nc, err := net.Dial("tcp", n.App.Addr("mqtt"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(nc)
	read := func() packet.Packet {
		t.Helper()
		h, body, err := packet.ReadPacket(r, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		p, err := packet.Decode(packet.V311, h, body)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, _ = nc.Write(packet.Append(nil, packet.V311, &packet.Connect{Version: packet.V311, ClientID: "worker-a", CleanStart: true, KeepAlive: 60}))
	if _, ok := read().(*packet.Connack); !ok {
		t.Fatal("no CONNACK")
	}
	_, _ = nc.Write(packet.Append(nil, packet.V311, &packet.Subscribe{PacketID: 1, Filters: []packet.Subscription{{Filter: filter, QoS: 1}}}))
	if sa, ok := read().(*packet.Suback); !ok || sa.Codes[0] != 1 {
		t.Fatalf("suback %+v", sa)
	}

	pub := client(t, n, "boss", true)
	for i := range total {
		wait(t, pub.Publish(fmt.Sprintf("jobs/%d", i%3), 1, false, fmt.Sprint("job", i)), "publish")
	}
	held := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(held) < total {
		_ = nc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		h, body, err := packet.ReadPacket(r, 1<<20)
		if err != nil {
			continue
		}
		if p, err := packet.Decode(packet.V311, h, body); err == nil {
			if pp, ok := p.(*packet.Publish); ok {
				held[string(pp.Payload)] = true
			}
		}
	}
	if len(held) != total {
		t.Fatalf("member a holds %d of %d", len(held), total)
	}
	var in inbox
	b := client(t, n, "worker-b", true)
	wait(t, b.Subscribe(filter, 1, in.handler), "subscribe b")
	time.Sleep(300 * time.Millisecond)
	if got := in.snapshot(); len(got) != 0 {
		t.Fatalf("member b got %q while a held it", got[0].Payload())
	}
	nc.Close() // a leaves holding what it got: b gets it
	got := in.waitFor(t, total)
	seen := map[string]bool{}
	for _, m := range got {
		seen[string(m.Payload())] = true
	}
	if len(seen) != total {
		t.Fatalf("member b has %d distinct of %d", len(seen), total)
	}
}

// snapshot copies what the inbox holds.
func (b *inbox) snapshot() []pahoMessage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]pahoMessage(nil), b.msgs...)
}
