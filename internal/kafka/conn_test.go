package kafka

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestParkedFetchEndsWithItsClient: a fetch parked for MaxWait = 2^31-1 ms
// on an empty partition is answered, and the connection's goroutines end,
// as soon as the client closes its connection.
func TestParkedFetchEndsWithItsClient(t *testing.T) {
	s := fuzzServer(t)
	name, _ := model.ParseTopicName("idle")
	if _, err := s.cat().CreateTopic(context.Background(), name, 1, broker.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	served := make(chan struct{})
	go func() {
		newConn(s, server, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext}).serve(context.Background())
		close(served)
	}()
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(11)
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = math.MaxInt32, 1, 1<<20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "idle"
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	body := req.AppendTo(nil)
	frame := []byte{0, 0, 0, 0}
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, 7) // correlation id
	frame = binary.BigEndian.AppendUint16(frame, 0) // client id ""
	frame = append(frame, body...)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	// The write returns once the broker has read the whole frame.
	if _, err := client.Write(frame); err != nil {
		t.Fatal(err)
	}
	client.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection outlived its client")
	}
}

// TestSlowAndIdleConnectionsClosed: a connection that sends nothing, and
// one that trickles a request byte by byte, are closed at their deadlines.
func TestSlowAndIdleConnectionsClosed(t *testing.T) {
	s := testServer(t, Options{IdleTimeout: 300 * time.Millisecond, FrameTimeout: 300 * time.Millisecond})
	serve := func() (net.Conn, chan struct{}) {
		client, server := net.Pipe()
		served := make(chan struct{})
		go func() {
			newConn(s, server, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext}).serve(context.Background())
			close(served)
		}()
		return client, served
	}
	idle, served := serve()
	defer idle.Close()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle connection stays open")
	}

	slow, served := serve()
	defer slow.Close()
	stop := make(chan struct{})
	go func() { // a 100-byte request, a byte every 50 ms: 5 s in all
		frame := append([]byte{0, 0, 0, 100}, make([]byte, 100)...)
		for _, b := range frame {
			if _, err := slow.Write([]byte{b}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer close(stop)
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("a request trickling in holds its connection")
	}
}
