package task

import (
	"bufio"
	"io"
	"net"
	"time"
)

// Request deadlines of a framed protocol connection: a connection may sit
// idle between requests for idle at most, and a request, once its first
// byte arrived, must arrive whole within a base time (FrameTimeout by
// default) plus a second per MiB of its announced size — so a peer that
// trickles bytes cannot hold a connection (and the memory of its half-read
// frame) forever.
const (
	FrameTimeout = 30 * time.Second
	frameRate    = 1 << 20 // bytes per second a slow but honest peer still reaches
)

// AwaitRequest waits until the next request's first byte has arrived, or
// idle passes (an error).
func AwaitRequest(nc net.Conn, r *bufio.Reader, idle time.Duration) error {
	if r.Buffered() > 0 {
		return nil
	}
	_ = nc.SetReadDeadline(time.Now().Add(idle))
	_, err := r.Peek(1)
	return err
}

// RequestDeadline bounds the rest of a request of size bytes, whose first
// byte has arrived, to base plus a second per MiB.
func RequestDeadline(nc net.Conn, size int, base time.Duration) {
	_ = nc.SetReadDeadline(time.Now().Add(base + time.Duration(size/frameRate)*time.Second))
}

// ReadFrame reads size bytes, growing its buffer as they arrive rather
// than allocating the announced size up front: a peer that announces a
// huge frame and sends little of it costs what it sent.
func ReadFrame(r io.Reader, size int) ([]byte, error) {
	buf := make([]byte, min(size, 64<<10))
	n := 0
	for n < size {
		if n == len(buf) {
			grown := make([]byte, min(size, 2*len(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[n:])
		n += m
		if err != nil && n < size {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}
