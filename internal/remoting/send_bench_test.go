package remoting

import (
	"bufio"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// BenchmarkSendPipelined drives SEND_MESSAGE requests (the Go client's
// header and properties, 128-byte bodies) over one loopback connection,
// 64 in flight, and reads the answers: the broker's per-send cost,
// decoding, storing and answering, with the process's allocations.
func BenchmarkSendPipelined(b *testing.B) {
	nc := dial(b, startServer(b))
	_ = nc.SetDeadline(time.Time{})
	body := make([]byte, 128)
	frame := func(opaque int32) []byte {
		return protocol.AppendFrame(nil, &protocol.Command{Code: protocol.SendMessage, Language: "GO", Version: 317, Opaque: opaque,
			ExtFields: protocol.Pairs("producerGroup", "bench", "topic", "bench", "defaultTopic", "TBW102",
				"defaultTopicQueueNums", "4", "queueId", strconv.Itoa(int(opaque)%4), "sysFlag", "0",
				"bornTimestamp", "1700000000000", "flag", "0", "reconsumeTimes", "0", "unitMode", "false",
				"maxReconsumeTimes", "0", "batch", "false",
				"properties", "UNIQ_KEY\x017F000001000000000000000000000"+strconv.Itoa(int(opaque))+"\x02WAIT\x01true\x02"),
			Body: body})
	}
	createTopic(b, nc, "bench", 4)
	if _, err := nc.Write(frame(0)); err != nil {
		b.Fatal(err)
	}
	if r := readCommand(b, nc); r.Code != protocol.Success {
		b.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	const inflight = 64
	sem := make(chan struct{}, inflight)
	done := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(nc, 64<<10)
		var n [4]byte
		buf := make([]byte, 4096)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(r, n[:]); err != nil {
				done <- err
				return
			}
			if _, err := io.ReadFull(r, buf[:protocol.FrameLength(n)]); err != nil {
				done <- err
				return
			}
			<-sem
		}
		done <- nil
	}()
	frames := make([][]byte, inflight)
	for i := range frames {
		frames[i] = frame(int32(i + 1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	w := bufio.NewWriterSize(nc, 64<<10)
	for i := 0; i < b.N; i++ {
		sem <- struct{}{}
		if _, err := w.Write(frames[i%inflight]); err != nil {
			b.Fatal(err)
		}
		if len(sem) == inflight || i == b.N-1 {
			_ = w.Flush()
		}
	}
	_ = w.Flush()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
