package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// RocketMQProduceRaw sends SEND_MESSAGE requests as rocketmq-client-go
// encodes them (header fields, UNIQ_KEY and WAIT properties), but from a
// lean pipelined sender: o.Connections connections with o.Inflight
// requests in flight each. It measures what the broker sustains when the
// Go client's own cost (tens of µs per send) is out of the way.
func RocketMQProduceRaw(ctx context.Context, o RocketMQOptions) (*Report, error) {
	addr := strings.Split(o.NameServer, ",")[0]
	conns, inflight := max(o.Connections, 1), max(o.Inflight, 1)
	body := make([]byte, o.Size)
	_, _ = rand.Read(body)
	per := o.Messages / int64(conns)
	lats := make([][]time.Duration, conns)
	errs := make(chan error, conns)
	bcpu0 := procCPU(o.BrokerPID)
	cpu0 := cpuTime()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func(c int, nc net.Conn) {
			defer wg.Done()
			defer nc.Close()
			l, err := rawSender(nc, c, per, inflight, o.Topic, func(int64) []byte { return body }, false)
			lats[c] = l
			if err != nil {
				errs <- err
			}
		}(c, nc)
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	r := opsReport(fmt.Sprintf("rocketmq produce (raw pipelined sender): %d B messages, %d connections × %d in flight", o.Size, conns, inflight), all, o.Size, el, cpu0)
	r.Extra = append(r.Extra, "(latency: request written to answer read; cpu: load generator)")
	KafkaOptions{BrokerPID: o.BrokerPID}.brokerExtra(r, bcpu0)
	return r, nil
}

// rawSender sends n messages over nc with up to inflight unanswered and
// returns each one's latency. next gives the i-th message's body; a paced
// sender waits in it until the message is due, and writes each send at
// once (flushEach) rather than gathering them.
func rawSender(nc net.Conn, c int, n int64, inflight int, topic string, next func(i int64) []byte, flushEach bool) ([]time.Duration, error) {
	sent := make([]time.Time, n)
	lats := make([]time.Duration, 0, n)
	slots := make(chan struct{}, inflight)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(nc, 64<<10)
		var hdr [4]byte
		buf := make([]byte, 0, 4096)
		for int64(len(lats)) < n {
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				readErr <- err
				return
			}
			size := int(binary.BigEndian.Uint32(hdr[:]))
			buf = append(buf[:0], make([]byte, size)...)
			if _, err := io.ReadFull(r, buf); err != nil {
				readErr <- err
				return
			}
			resp, err := protocol.Decode(buf)
			if err != nil {
				readErr <- err
				return
			}
			if resp.Code != protocol.Success {
				readErr <- fmt.Errorf("send answered %d: %s", resp.Code, resp.Remark)
				return
			}
			if op := int64(resp.Opaque); op >= 0 && op < n {
				lats = append(lats, time.Since(sent[op]))
			}
			<-slots
		}
		readErr <- nil
	}()
	w := bufio.NewWriterSize(nc, 64<<10)
	var frame []byte
	for i := int64(0); i < n; i++ {
		select {
		case slots <- struct{}{}:
		case err := <-readErr:
			return lats, err
		}
		body := next(i)
		frame = protocol.AppendFrame(frame[:0], &protocol.Command{Code: protocol.SendMessage, Language: "GO", Version: 317,
			Opaque: int32(i), ExtFields: protocol.Pairs("producerGroup", "rosetta-bench", "topic", topic,
				"defaultTopic", "TBW102", "defaultTopicQueueNums", "4", "queueId", strconv.Itoa(int(i%8)), "sysFlag", "0",
				"bornTimestamp", strconv.FormatInt(time.Now().UnixMilli(), 10), "flag", "0", "reconsumeTimes", "0",
				"unitMode", "false", "maxReconsumeTimes", "0", "batch", "false",
				"properties", "UNIQ_KEY\x01"+fmt.Sprintf("7F000001%04X%016X", c, i)+"\x02WAIT\x01true\x02"),
			Body: body})
		sent[i] = time.Now()
		if _, err := w.Write(frame); err != nil {
			return lats, err
		}
		if flushEach || len(slots) == cap(slots) || i == n-1 {
			if err := w.Flush(); err != nil {
				return lats, err
			}
		}
	}
	if err := w.Flush(); err != nil {
		return lats, err
	}
	return lats, <-readErr
}

// e2eRawSender is e2eSender with the raw sender: message i goes over
// connection i mod o.Connections, each send written as it falls due.
func e2eRawSender(ctx context.Context, o RocketMQOptions, body []byte) (func(func(int64, []byte) []byte) error, func(), error) {
	addr := strings.Split(o.NameServer, ",")[0]
	conns := max(o.Connections, 1)
	ncs := make([]net.Conn, conns)
	stop := func() {
		for _, nc := range ncs {
			if nc != nil {
				nc.Close()
			}
		}
	}
	for c := range ncs {
		nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			stop()
			return nil, nil, err
		}
		ncs[c] = nc
	}
	// The topic's first send, from a connection of its own.
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		stop()
		return nil, nil, err
	}
	_, err = rawSender(nc, conns, 1, 1, o.Topic, func(int64) []byte { return body }, true)
	nc.Close()
	if err != nil {
		stop()
		return nil, nil, err
	}
	send := func(stamped func(int64, []byte) []byte) error {
		errs := make(chan error, conns)
		for c, nc := range ncs {
			go func() {
				buf := make([]byte, len(body))
				n := o.Messages / int64(conns)
				if int64(c) < o.Messages%int64(conns) {
					n++
				}
				_, err := rawSender(nc, c, n, max(o.Inflight, 1), o.Topic, func(i int64) []byte {
					return stamped(i*int64(conns)+int64(c), buf)
				}, true)
				errs <- err
			}()
		}
		var first error
		for range ncs {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	return send, stop, nil
}
