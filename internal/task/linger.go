package task

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// LingerConn is a TCP connection whose reads coalesce small requests while
// its peer keeps it busy. A client with many synchronous senders on one
// connection (rocketmq-client-go writes each request in four pieces) makes
// a server that reads eagerly wake up, read and park once per piece; the
// wake-ups, not the work, then dominate its CPU per request. While
// lingering, a read that finds nothing waits until a batch of bytes has
// arrived (SO_RCVLOWAT) or the linger passed, so one wake-up reads many
// requests.
//
// Lingering delays requests by up to the linger, which only a peer with
// enough requests in flight absorbs. The connection therefore lingers only
// while that holds: it measures the peer's request rate (the caller reports
// each request with Request) in alternating windows with and without
// lingering and keeps lingering only while the rate stays within a tenth
// of the rate without it. A peer with one or two synchronous senders
// slows down and so is served without lingering (after a probe window,
// repeated ever more rarely).
type LingerConn struct {
	*net.TCPConn
	raw      syscall.RawConn
	linger   time.Duration
	batch    int       // SO_RCVLOWAT while lingering
	lowat    int       // the socket's current SO_RCVLOWAT
	deadline time.Time // the caller's read deadline
	ctl      lingerControl
}

// NewLingerConn wraps nc when it is a plain TCP connection and linger is
// positive; otherwise it returns nc unchanged. Reads that linger wait at
// most linger for batch bytes.
func NewLingerConn(nc net.Conn, linger time.Duration, batch int) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok || linger <= 0 || batch <= 1 {
		return nc
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	return &LingerConn{TCPConn: tc, raw: raw, linger: linger, batch: batch, lowat: 1,
		ctl: newLingerControl(linger, time.Now())}
}

// Request tells the connection that one request was read off it.
func (l *LingerConn) Request() { l.ctl.request(time.Now()) }

// Lingering reports whether reads currently linger.
func (l *LingerConn) Lingering() bool { return l.ctl.on }

// SetReadDeadline sets the caller's read deadline, which lingering reads
// honour too.
func (l *LingerConn) SetReadDeadline(t time.Time) error {
	l.deadline = t
	return l.TCPConn.SetReadDeadline(t)
}

// SetDeadline sets both deadlines.
func (l *LingerConn) SetDeadline(t time.Time) error {
	l.deadline = t
	return l.TCPConn.SetDeadline(t)
}

// Read reads what has arrived; while lingering and nothing has, it waits
// for a batch of bytes or the linger before taking what came.
func (l *LingerConn) Read(p []byte) (int, error) {
	if !l.ctl.on {
		l.setLowat(1)
		return l.TCPConn.Read(p)
	}
	l.setLowat(l.batch)
	until := time.Now().Add(l.linger)
	if !l.deadline.IsZero() && l.deadline.Before(until) {
		until = l.deadline
	}
	_ = l.TCPConn.SetReadDeadline(until)
	n, err := l.TCPConn.Read(p)
	_ = l.TCPConn.SetReadDeadline(l.deadline)
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || (!l.deadline.IsZero() && !time.Now().Before(l.deadline)) {
		return n, err
	}
	// The linger passed before a batch arrived: take what did.
	if n, err = l.readNow(p); n > 0 || err != nil {
		return n, err
	}
	// Nothing at all: the peer paused; wait for its next byte.
	l.setLowat(1)
	return l.TCPConn.Read(p)
}

// readNow makes one non-blocking read attempt: (0, nil) when nothing is
// there.
func (l *LingerConn) readNow(p []byte) (int, error) {
	var n int
	var rerr error
	err := l.raw.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), p)
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EINTR):
		return 0, nil
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// setLowat sets the socket's receive low-water mark: epoll reports it
// readable (and wakes the reader) only once that many bytes are queued.
func (l *LingerConn) setLowat(v int) {
	if l.lowat == v {
		return
	}
	var serr error
	if err := l.raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, v)
	}); err != nil || serr != nil {
		l.ctl.disable() // cannot linger on this socket; read plainly
		return
	}
	l.lowat = v
}

// Linger controller constants. The controller runs trials: lingerTrial
// windows of lingerWindow without lingering, then as many with it; if the
// peer's request rate with lingering stays within lingerTolerance of the
// rate without, the connection lingers for lingerPeriod before the next
// trial; otherwise it does not until a trial after a back-off that doubles
// from lingerMinBackoff to lingerMaxBackoff.
const (
	lingerWindow     = 100 * time.Millisecond
	lingerTrial      = 3
	lingerPeriod     = 3 * time.Second
	lingerMinBackoff = time.Second
	lingerMaxBackoff = 30 * time.Second
	lingerTolerance  = 0.95
)

// lingerControl decides when a connection lingers, from the peer's request
// rate in windows with and without lingering. It is driven by the caller's
// clock, so it can be tested without one.
type lingerControl struct {
	minRate  float64 // requests/s below which a linger would catch fewer than two
	on       bool
	disabled bool
	start    time.Time // the current window's start
	count    int       // requests in it
	// The trial: windows counted so far (without lingering, then with),
	// and the requests and time of each half.
	trial     int
	offN, onN int
	offT, onT time.Duration
	next      time.Time // the next trial starts in the first window after this
	backoff   time.Duration
}

func newLingerControl(linger time.Duration, now time.Time) lingerControl {
	return lingerControl{minRate: 2 / linger.Seconds(), start: now, backoff: lingerMinBackoff}
}

// disable stops lingering for good.
func (c *lingerControl) disable() { c.disabled, c.on = true, false }

// request counts one request at now and, at the end of a window, decides
// whether the next one lingers.
func (c *lingerControl) request(now time.Time) {
	c.count++
	elapsed := now.Sub(c.start)
	if elapsed < lingerWindow || c.disabled {
		return
	}
	n := c.count
	c.start, c.count = now, 0
	if float64(n)/elapsed.Seconds() < c.minRate {
		// Too few requests for a linger to batch: no lingering, and the
		// trial (if any) starts over.
		c.on, c.trial, c.offN, c.offT = false, 0, 0, 0
		return
	}
	switch {
	case c.trial == 0 && now.Before(c.next):
		// Between trials: keep the outcome of the last one.
		return
	case c.trial < lingerTrial:
		if c.trial == 0 {
			c.offN, c.offT, c.onN, c.onT = 0, 0, 0, 0
		}
		if c.trial > 0 { // the first window may have lingered (the previous outcome)
			c.offN += n
			c.offT += elapsed
		}
		c.on = false
		c.trial++
		if c.trial == lingerTrial {
			c.on = true
		}
	case c.trial < 2*lingerTrial:
		if c.trial > lingerTrial { // the first lingering window started without
			c.onN += n
			c.onT += elapsed
		}
		c.trial++
		if c.trial < 2*lingerTrial {
			return
		}
		c.trial = 0
		off := float64(c.offN) / c.offT.Seconds()
		on := float64(c.onN) / c.onT.Seconds()
		if on >= lingerTolerance*off {
			c.on, c.backoff, c.next = true, lingerMinBackoff, now.Add(lingerPeriod)
			return
		}
		c.on, c.next = false, now.Add(c.backoff)
		c.backoff = min(2*c.backoff, lingerMaxBackoff)
	}
}
