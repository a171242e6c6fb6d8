package mqtt_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
)

// TestBadInput: protocol violations close the connection — an MQTT 5 one
// after a DISCONNECT with the reason code — and the broker serves the
// next client: a packet before CONNECT, an oversize packet, a second
// CONNECT, a PUBLISH of QoS 3, a wildcard in a topic name, invalid UTF-8,
// an unknown protocol level (CONNACK 0x01 / 0x84).
func TestBadInput(t *testing.T) {
	t.Parallel()
	cfg := apptest.TestConfig(t.TempDir())
	cfg.MQTT.MaxPacketSize = 4096
	n := apptest.StartTestNode(t, cfg)
	dial := func(v byte) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", n.App.Addr("mqtt"))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		if v == 0 {
			return c, r
		}
		if _, err := c.Write(packet.Append(nil, v, &packet.Connect{Version: v, ClientID: "bad", CleanStart: true})); err != nil {
			t.Fatal(err)
		}
		if h, _, err := packet.ReadPacket(r, 1<<20); err != nil || h>>4 != packet.CONNACK {
			t.Fatalf("connack: %x %v", h, err)
		}
		return c, r
	}
	// closed checks the connection ends, after a DISCONNECT with code (0:
	// none expected).
	closed := func(what string, r *bufio.Reader, v byte, code byte) {
		t.Helper()
		if code != 0 {
			h, body, err := packet.ReadPacket(r, 1<<20)
			if err != nil || h>>4 != packet.DISCONNECT {
				t.Fatalf("%s: %x %v, want DISCONNECT", what, h, err)
			}
			p, err := packet.Decode(v, h, body)
			if err != nil || p.(*packet.Disconnect).Code != code {
				t.Fatalf("%s: %+v %v, want code 0x%x", what, p, err, code)
			}
		}
		if _, err := io.ReadAll(r); err != nil {
			t.Fatalf("%s: not closed: %v", what, err)
		}
	}

	c, r := dial(0)
	_, _ = c.Write(packet.Append(nil, packet.V311, &packet.Pingreq{}))
	closed("a packet before CONNECT", r, 0, 0)

	c, r = dial(packet.V5)
	_, _ = c.Write([]byte{packet.PUBLISH << 4, 0xff, 0xff, 0x03})
	closed("an oversize packet", r, packet.V5, packet.CodeTooLarge)

	c, r = dial(packet.V5)
	_, _ = c.Write(packet.Append(nil, packet.V5, &packet.Connect{Version: packet.V5, ClientID: "again"}))
	closed("a second CONNECT", r, packet.V5, packet.CodeProtocolError)

	c, r = dial(packet.V5)
	_, _ = c.Write([]byte{packet.PUBLISH<<4 | 0x06, 4, 0, 1, 'a', 0})
	closed("QoS 3", r, packet.V5, packet.CodeMalformed)

	c, r = dial(packet.V5)
	_, _ = c.Write(packet.Append(nil, packet.V5, &packet.Publish{Topic: "a/+/b", Payload: []byte("x")}))
	closed("a wildcard in a topic name", r, packet.V5, packet.CodeTopicNameBad)

	c, r = dial(packet.V311)
	_, _ = c.Write([]byte{packet.PUBLISH << 4, 5, 0, 2, 0xc3, 0x28, 'x'})
	closed("invalid UTF-8", r, packet.V311, 0)

	c, r = dial(0)
	_, _ = c.Write([]byte{packet.CONNECT << 4, 12, 0, 4, 'M', 'Q', 'T', 'T', 9, 2, 0, 10, 0, 0})
	h, body, err := packet.ReadPacket(r, 1024)
	if err != nil || h>>4 != packet.CONNACK || len(body) != 2 || body[1] != 0x01 {
		t.Fatalf("unknown level: %x %x %v", h, body, err)
	}
	closed("an unknown level", r, 0, 0)

	// The broker serves the next client.
	var in inbox
	sub := client(t, n, "after", true)
	wait(t, sub.Subscribe("ok/#", 1, in.handler), "subscribe")
	wait(t, client(t, n, "after-pub", true).Publish("ok/1", 1, false, "fine"), "publish")
	in.waitFor(t, 1)
}
