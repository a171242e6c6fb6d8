package pulsar_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/app/apptest"
	rp "github.com/rosettamq/rosetta/internal/pulsar"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// TestBadInput: an oversize frame, a command before CONNECT and garbage
// close the connection; an unsupported command gets ERROR; a SEND whose
// checksum is wrong gets SEND_ERROR; nothing is stored and the broker
// serves the next client.
func TestBadInput(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	dial := func() *rawConn { return dialRaw(t, n) }
	closed := func(c *rawConn, what string) {
		t.Helper()
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("%s: connection not closed: %v", what, err)
		}
	}
	write := func(c *rawConn, cmd *pulsarpb.BaseCommand) { t.Helper(); c.write(t, cmd) }
	read := func(c *rawConn) *pulsarpb.BaseCommand { t.Helper(); return c.read(t) }
	connect := func(c *rawConn) { t.Helper(); c.connect(t) }

	c := dial()
	_, _ = c.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
	closed(c, "oversize frame")

	c = dial()
	write(c, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PING.Enum(), Ping: &pulsarpb.CommandPing{}})
	closed(c, "a command before CONNECT")

	c = dial()
	_, _ = c.Write([]byte{0, 0, 0, 8, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff})
	closed(c, "garbage")

	c = dial()
	connect(c)
	write(c, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_NEW_TXN.Enum(), NewTxn: &pulsarpb.CommandNewTxn{RequestId: proto.Uint64(9)}})
	if cmd := read(c); cmd.GetType() != pulsarpb.BaseCommand_ERROR || cmd.GetError().GetRequestId() != 9 {
		t.Fatalf("unsupported command: %v", cmd)
	}
	write(c, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_PRODUCER.Enum(), Producer: &pulsarpb.CommandProducer{
		Topic: proto.String("bad-input"), ProducerId: proto.Uint64(1), RequestId: proto.Uint64(10)}})
	if cmd := read(c); cmd.GetType() != pulsarpb.BaseCommand_PRODUCER_SUCCESS {
		t.Fatalf("producer: %v", cmd)
	}
	send := &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_SEND.Enum(), Send: &pulsarpb.CommandSend{
		ProducerId: proto.Uint64(1), SequenceId: proto.Uint64(0), NumMessages: proto.Int32(1)}}
	md := &pulsarpb.MessageMetadata{ProducerName: proto.String("x"), SequenceId: proto.Uint64(0), PublishTime: proto.Uint64(1)}
	frame, err := rp.AppendPayloadCommand(nil, send, nil, md, []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	frame[len(frame)-1] ^= 0xff // corrupt the payload under its checksum
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	if cmd := read(c); cmd.GetType() != pulsarpb.BaseCommand_SEND_ERROR || cmd.GetSendError().GetError() != pulsarpb.ServerError_ChecksumError {
		t.Fatalf("corrupt send: %v", cmd)
	}

	// Nothing stored; a real client works.
	cl := client(t, n)
	r, err := cl.CreateReader(pulsar.ReaderOptions{Topic: "bad-input", StartMessageID: pulsar.EarliestMessageID()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.HasNext() {
		m, _ := r.Next(context.Background())
		t.Fatalf("stored from bad input: %q", m.Payload())
	}
}

// rawConn speaks the protocol frame by frame, as no client would.
type rawConn struct{ net.Conn }

// dialRaw connects to the node's Pulsar port (closed when the test ends).
func dialRaw(t *testing.T, n *apptest.TestNode) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", n.App.Addr("pulsar"))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return &rawConn{c}
}

func (c *rawConn) write(t *testing.T, cmd *pulsarpb.BaseCommand) {
	t.Helper()
	b, err := rp.AppendCommand(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// readFrame reads the next frame.
func (c *rawConn) readFrame(t *testing.T) rp.Frame {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	f, err := rp.DecodeFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (c *rawConn) read(t *testing.T) *pulsarpb.BaseCommand {
	t.Helper()
	return c.readFrame(t).Command
}

func (c *rawConn) connect(t *testing.T) {
	t.Helper()
	c.write(t, &pulsarpb.BaseCommand{Type: pulsarpb.BaseCommand_CONNECT.Enum(), Connect: &pulsarpb.CommandConnect{
		ClientVersion: proto.String("test"), ProtocolVersion: proto.Int32(20)}})
	if cmd := c.read(t); cmd.GetType() != pulsarpb.BaseCommand_CONNECTED {
		t.Fatalf("connect: %v", cmd)
	}
}
