package grpcv5

import (
	"net"
	"time"
)

// http2Preface is what every HTTP/2 client connection starts with.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// frameDeadlineListener gives every accepted connection frame deadlines:
// once an HTTP/2 frame (or the connection preface) has started to arrive,
// the rest of it must arrive within base plus a second per MiB, so a peer
// trickling bytes cannot hold a connection forever (grpc-go has no such
// deadline of its own; idle connections are its keepalive's business).
type frameDeadlineListener struct {
	net.Listener
	base time.Duration
}

func (l frameDeadlineListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &frameDeadlineConn{Conn: nc, base: l.base, remaining: len(http2Preface)}, nil
}

// frameDeadlineConn tracks HTTP/2 framing in the bytes read (the preface,
// then 9-byte headers with a 24-bit payload length) and sets the read
// deadline of each frame in progress; between frames it sets none.
type frameDeadlineConn struct {
	net.Conn
	base      time.Duration
	started   bool // a byte has arrived: before, the server's own handshake deadline stands
	preface   bool // the preface is done
	hdr       [9]byte
	hdrN      int
	remaining int       // bytes of the preface or of the current frame's payload still to come
	deadline  time.Time // of the frame in progress
	inFrame   bool
	set       time.Time // the read deadline last set (zero: none)
}

func (c *frameDeadlineConn) Read(p []byte) (int, error) {
	if c.started {
		// Most reads start between frames, where no deadline stands: the
		// deadline is only touched when it changes (each change is a
		// timer update).
		want := time.Time{}
		if c.inFrame {
			want = c.deadline
		}
		if !want.Equal(c.set) {
			_ = c.Conn.SetReadDeadline(want)
			c.set = want
		}
	}
	n, err := c.Conn.Read(p)
	c.track(p[:n])
	return n, err
}

// track advances the framing state over b.
func (c *frameDeadlineConn) track(b []byte) {
	for len(b) > 0 {
		if !c.inFrame {
			c.inFrame, c.started = true, true
			c.deadline = time.Now().Add(c.base)
		}
		if !c.preface || c.hdrN == len(c.hdr) { // within the preface or a payload
			k := min(len(b), c.remaining)
			c.remaining -= k
			b = b[k:]
			if c.remaining == 0 {
				c.preface, c.hdrN, c.inFrame = true, 0, false
			}
			continue
		}
		k := copy(c.hdr[c.hdrN:], b)
		c.hdrN += k
		b = b[k:]
		if c.hdrN == len(c.hdr) {
			c.remaining = int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			c.deadline = c.deadline.Add(time.Duration(c.remaining/(1<<20)) * time.Second)
			if c.remaining == 0 {
				c.hdrN, c.inFrame = 0, false
			}
		}
	}
}
