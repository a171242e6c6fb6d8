package task

import (
	"bufio"
	"errors"
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
	return readFrame(r, size, func(int) bool { return true }, FrameBuffers{})
}

// FrameBuffers supplies the buffers a frame grows through: Get returns n
// bytes (contents undefined), Put takes back one outgrown. Zero: new
// buffers, outgrown ones left to the collector.
type FrameBuffers struct {
	First int // the first buffer's size (64 KiB when zero)
	Get   func(n int) []byte
	Put   func([]byte)
}

// ReadFrameWithin is ReadFrame holding budget for the frame's bytes as its
// buffer grows: a peer that announces a huge frame and sends little of it
// holds of the budget what it sent, not what it announced, so it cannot
// starve other connections. On success size bytes are held (the caller
// releases them once the request is handled); on failure none.
func ReadFrameWithin(r io.Reader, size int, b *ByteBudget, done <-chan struct{}, bufs FrameBuffers) ([]byte, error) {
	held := 0
	frame, err := readFrame(r, size, func(n int) bool {
		if !b.Acquire(int64(n-held), done) {
			return false
		}
		held = n
		return true
	}, bufs)
	if err != nil {
		b.Release(int64(held))
	}
	return frame, err
}

// errNoBudget is a frame abandoned while waiting for budget.
var errNoBudget = errors.New("connection closing while waiting for request budget")

// peeker is a reader that can wait for bytes without taking them
// (bufio.Reader).
type peeker interface {
	Peek(n int) ([]byte, error)
}

// readFrame reads size bytes into a buffer that grows (doubling) as they
// arrive, asking reserve before each size the buffer takes. A full buffer
// grows once more bytes have arrived (when r can tell), so a peer that
// stops sending holds what it sent, not twice that.
func readFrame(r io.Reader, size int, reserve func(n int) bool, bufs FrameBuffers) ([]byte, error) {
	get, put := bufs.Get, bufs.Put
	if get == nil {
		get = func(n int) []byte { return make([]byte, n) }
	}
	if put == nil {
		put = func([]byte) {}
	}
	first := bufs.First
	if first <= 0 {
		first = 64 << 10
	}
	first = min(size, first)
	if !reserve(first) {
		return nil, errNoBudget
	}
	buf := get(first)
	n := 0
	pk, canPeek := r.(peeker)
	for n < size {
		if n == len(buf) {
			if canPeek {
				if _, err := pk.Peek(1); err != nil {
					put(buf)
					if err == io.EOF {
						err = io.ErrUnexpectedEOF
					}
					return nil, err
				}
			}
			next := min(size, 2*len(buf))
			if !reserve(next) {
				put(buf)
				return nil, errNoBudget
			}
			grown := get(next)
			copy(grown, buf)
			put(buf)
			buf = grown
		}
		m, err := r.Read(buf[n:])
		n += m
		if err != nil && n < size {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			put(buf)
			return nil, err
		}
	}
	return buf, nil
}
