package replication

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/rosettamq/rosetta/internal/model"
)

// TCPTransport carries every group's Raft messages between nodes: one TCP
// connection per pair of nodes (the lower node id dials, from its own
// address, so a partition between two addresses really cuts them), frames
// of [length u32 | group u16 | message], a hello naming cluster and node
// first, and a keepalive every second so a silent peer is noticed within
// a few seconds. A message that cannot be sent is dropped and the group
// told the peer is unreachable; Raft retransmits.
type TCPTransport struct {
	cfg    TCPConfig
	log    *slog.Logger
	mu     sync.Mutex
	groups map[model.GroupID]*Group
	// peers: every other member's connection, replaced whole (copy on
	// write) when members join or leave.
	peers  atomic.Pointer[map[model.NodeID]*peer]
	ctx    context.Context
	ln     net.Listener
	tls    *tls.Config // nil: plain TCP
	cancel context.CancelFunc
	wg     sync.WaitGroup
	calls  calls
}

// TCPConfig configures a TCPTransport.
type TCPConfig struct {
	Cluster string // the cluster's name: a connection from another is refused
	Node    model.NodeID
	// Listen is the address the transport accepts peers on; Peers maps
	// every other node to its transport address; LocalHost, when set, is
	// the host outgoing connections are made from.
	Listen   string
	Listener net.Listener // instead of Listen: an open listener
	// Secret, when set, authenticates peers: each end challenges the other
	// to answer with an HMAC-SHA256 under the secret, so a node without it
	// cannot join the traffic. TLS (which needs Secret) encrypts it, the
	// answers bound to the TLS session (secure.go).
	Secret    string
	TLS       bool
	Peers     map[model.NodeID]string
	LocalHost string
	Logger    *slog.Logger
}

const (
	frameHeader    = 6 // length u32 | group u16
	maxFrame       = 64 << 20
	keepaliveGroup = 0xFFFF
	helloMagic     = "RSRAFT1"
	keepalive      = time.Second
	silentPeer     = 5 * time.Second
	sendQueue      = 4096
)

// peer is the connection to one other node.
type peer struct {
	id     model.NodeID
	addr   string
	stop   context.CancelFunc // ends its goroutines (the member left)
	sendCh chan frame
	mu     sync.Mutex
	conn   net.Conn
	ready  chan struct{} // closed and replaced when conn changes
}

type frame struct {
	group model.GroupID
	msg   *pb.Message
	raw   []byte // instead of msg: a call frame's body
}

// NewTCPTransport listens on cfg.Listen and starts connecting to peers.
func NewTCPTransport(cfg TCPConfig) (*TCPTransport, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Listen); err != nil {
			return nil, fmt.Errorf("raft transport: %w", err)
		}
	}
	t := &TCPTransport{cfg: cfg, log: cfg.Logger.With("component", "raft-transport"), groups: map[model.GroupID]*Group{}, ln: ln}
	t.peers.Store(&map[model.NodeID]*peer{})
	if cfg.TLS {
		if cfg.Secret == "" {
			ln.Close()
			return nil, fmt.Errorf("%w: raft transport TLS needs the cluster secret (it authenticates the members)", model.ErrInvalidConfig)
		}
		cert, err := selfSignedCert()
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("raft transport certificate: %w", err)
		}
		t.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.ctx, t.cancel = ctx, cancel
	for id, addr := range cfg.Peers {
		t.AddPeer(id, addr)
	}
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.acceptLoop(ctx) }()
	return t, nil
}

// peer returns the connection to node id (nil: not a member).
func (t *TCPTransport) peer(id model.NodeID) *peer { return (*t.peers.Load())[id] }

// AddPeer connects to a member at addr (a member joining, or moving to
// another address).
func (t *TCPTransport) AddPeer(id model.NodeID, addr string) {
	if id == t.cfg.Node {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.peers.Load()
	if p := old[id]; p != nil {
		if p.addr == addr {
			return
		}
		t.stopPeerLocked(p)
	}
	ctx, stop := context.WithCancel(t.ctx)
	p := &peer{id: id, addr: addr, stop: stop, sendCh: make(chan frame, sendQueue), ready: make(chan struct{})}
	next := maps.Clone(old)
	next[id] = p
	t.peers.Store(&next)
	t.wg.Add(1)
	go func() { defer t.wg.Done(); t.writeLoop(ctx, p) }()
	if t.cfg.Node < id {
		t.wg.Add(1)
		go func() { defer t.wg.Done(); t.dialLoop(ctx, p) }()
	}
}

// RemovePeer drops the connection to a member that left.
func (t *TCPTransport) RemovePeer(id model.NodeID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.peers.Load()
	p := old[id]
	if p == nil {
		return
	}
	t.stopPeerLocked(p)
	next := maps.Clone(old)
	delete(next, id)
	t.peers.Store(&next)
}

func (t *TCPTransport) stopPeerLocked(p *peer) {
	p.stop()
	p.setConn(nil)
}

// Addr is the address the transport listens on.
func (t *TCPTransport) Addr() string { return t.ln.Addr().String() }

// Register routes a group's incoming messages to it.
func (t *TCPTransport) Register(g *Group) {
	t.mu.Lock()
	t.groups[g.cfg.Group] = g
	t.mu.Unlock()
}

// Unregister stops routing messages to g (a replica the node no longer
// hosts); a group registered since under the same id stays.
func (t *TCPTransport) Unregister(g *Group) {
	t.mu.Lock()
	if t.groups[g.cfg.Group] == g {
		delete(t.groups, g.cfg.Group)
	}
	t.mu.Unlock()
}

// Close stops the transport and closes its connections.
func (t *TCPTransport) Close() error {
	t.cancel()
	err := t.ln.Close()
	t.mu.Lock()
	for _, p := range *t.peers.Load() {
		p.setConn(nil)
	}
	t.mu.Unlock()
	t.wg.Wait()
	return err
}

// Send queues messages for their nodes (dropped when a queue is full).
func (t *TCPTransport) Send(group model.GroupID, msgs []*pb.Message) {
	for _, m := range msgs {
		p := t.peer(model.NodeID(m.GetTo()))
		if p == nil {
			continue
		}
		select {
		case p.sendCh <- frame{group: group, msg: m}:
		default:
			t.unreachable(p.id)
		}
	}
}

// processGone says whether a connection's read error is the end a dead
// process's connection has (an end of stream or a reset), not a timeout or
// this side's own close.
func processGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// peerGone tells every group that a peer's process is gone.
func (t *TCPTransport) peerGone(id model.NodeID) {
	for _, g := range t.registered() {
		g.PeerGone(id)
	}
}

// registered lists the registered groups.
func (t *TCPTransport) registered() []*Group {
	t.mu.Lock()
	defer t.mu.Unlock()
	gs := make([]*Group, 0, len(t.groups))
	for _, g := range t.groups {
		gs = append(gs, g)
	}
	return gs
}

// reconnected: a new connection to a peer may be to a process that came
// back with less of a group's log than its leader believes it holds (its
// disk was replaced); every group probes it again rather than streaming to
// it, so an idle group's leader still finds out and sends a snapshot.
func (t *TCPTransport) reconnected(id model.NodeID) { t.unreachable(id) }

func (t *TCPTransport) unreachable(id model.NodeID) {
	for _, g := range t.registered() {
		g.Unreachable(id)
	}
}

func (p *peer) setConn(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn != c {
		p.conn.Close()
	}
	p.conn = c
	close(p.ready)
	p.ready = make(chan struct{})
}

func (p *peer) current() (net.Conn, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn, p.ready
}

// dropConn forgets c if it is still the peer's connection.
func (p *peer) dropConn(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == c {
		p.conn.Close()
		p.conn = nil
		close(p.ready)
		p.ready = make(chan struct{})
	}
}

// dialLoop keeps a connection to a peer with a higher id.
func (t *TCPTransport) dialLoop(ctx context.Context, p *peer) {
	d := net.Dialer{Timeout: 2 * time.Second}
	if t.cfg.LocalHost != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(t.cfg.LocalHost)}
	}
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		c, ready := p.current()
		if c != nil {
			select {
			case <-ctx.Done():
				return
			case <-ready:
			}
			continue
		}
		raw, err := d.DialContext(ctx, "tcp", p.addr)
		var conn net.Conn
		if err == nil {
			conn, err = t.secureClient(raw)
		}
		if err == nil {
			err = t.writeHello(conn)
		}
		if err == nil && t.cfg.Secret != "" {
			// Prove this node to the peer, then have the peer prove itself.
			if err = t.prove(conn, t.cfg.Node); err == nil {
				err = t.verify(conn, p.id)
			}
		}
		if err != nil {
			if raw != nil {
				raw.Close()
			}
			t.log.Debug("dial peer", "peer", p.id, "addr", p.addr, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		t.log.Info("connected to peer", "peer", p.id, "addr", p.addr)
		p.setConn(conn)
		t.reconnected(p.id)
		t.wg.Add(1)
		go func() { defer t.wg.Done(); t.readLoop(ctx, p, conn) }()
	}
}

// acceptLoop accepts peers with lower ids.
func (t *TCPTransport) acceptLoop(ctx context.Context) {
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.log.Warn("accept peer", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			raw := conn
			conn, err := t.secureServer(raw)
			if err != nil {
				t.log.Warn("refused a peer connection", "remote", raw.RemoteAddr().String(), "err", err)
				raw.Close()
				return
			}
			id, err := t.readHello(conn)
			if err != nil {
				t.log.Warn("refused a peer connection", "remote", conn.RemoteAddr().String(), "err", err)
				conn.Close()
				return
			}
			p := t.peer(id)
			if p == nil { // left meanwhile
				conn.Close()
				return
			}
			t.log.Info("peer connected", "peer", id, "remote", conn.RemoteAddr().String())
			p.setConn(conn)
			t.reconnected(id)
			t.readLoop(ctx, p, conn)
		}()
	}
}

// writeHello: magic | node u32 | cluster length u16 | cluster.
func (t *TCPTransport) writeHello(c net.Conn) error {
	b := append([]byte(helloMagic), 0, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(helloMagic):], uint32(t.cfg.Node))
	binary.BigEndian.PutUint16(b[len(helloMagic)+4:], uint16(len(t.cfg.Cluster)))
	b = append(b, t.cfg.Cluster...)
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Write(b)
	return err
}

func (t *TCPTransport) readHello(c net.Conn) (model.NodeID, error) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	id, name, err := decodeHello(c)
	if err != nil {
		return 0, err
	}
	if name != t.cfg.Cluster {
		return 0, fmt.Errorf("peer of cluster %q, this is %q", name, t.cfg.Cluster)
	}
	if t.peer(id) == nil || id >= t.cfg.Node {
		return 0, fmt.Errorf("unexpected peer node %d", id)
	}
	if t.cfg.Secret != "" {
		if err := t.verify(c, id); err != nil {
			return 0, err
		}
		if err := t.prove(c, t.cfg.Node); err != nil {
			return 0, err
		}
	}
	return id, nil
}

// decodeHello reads a hello: the node and cluster name it names.
func decodeHello(r io.Reader) (model.NodeID, string, error) {
	head := make([]byte, len(helloMagic)+6)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, "", err
	}
	if string(head[:len(helloMagic)]) != helloMagic {
		return 0, "", errors.New("not a raft transport hello")
	}
	id := model.NodeID(binary.BigEndian.Uint32(head[len(helloMagic):]))
	name := make([]byte, binary.BigEndian.Uint16(head[len(helloMagic)+4:]))
	if _, err := io.ReadFull(r, name); err != nil {
		return 0, "", err
	}
	return id, string(name), nil
}

// readFrame reads one frame: its group and message (nil for a keepalive).
// maxKeptScratch bounds the frame buffer a reader keeps between frames.
const maxKeptScratch = 8 << 20

// readFrame reads one frame. A Raft message's body is read into a buffer
// of its own, which the decoded message keeps slices of (decodeMessage); a
// keepalive's or call's into scratch (kept for the next one), a call's
// body coming back copied, with no message.
func readFrame(r io.Reader, scratch *[]byte) (model.GroupID, *pb.Message, []byte, error) {
	var head [frameHeader]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 2 || n > maxFrame {
		return 0, nil, nil, fmt.Errorf("%w: raft frame of %d bytes", model.ErrCorruptRecord, n)
	}
	group := model.GroupID(binary.BigEndian.Uint16(head[4:]))
	var body []byte
	if group == keepaliveGroup || group == callGroup {
		body = (*scratch)[:0]
		if cap(body) < int(n-2) {
			body = make([]byte, n-2)
			if n-2 <= maxKeptScratch {
				*scratch = body
			}
		}
		body = body[:n-2]
	} else {
		// A Raft message's own buffer: its entries keep slices of it.
		body = make([]byte, n-2)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, nil, err
	}
	switch group {
	case keepaliveGroup:
		return group, nil, nil, nil
	case callGroup:
		if len(body) > maxCallBytes+callHeader {
			return 0, nil, nil, fmt.Errorf("%w: call frame of %d bytes", model.ErrCorruptRecord, len(body))
		}
		return group, nil, append([]byte(nil), body...), nil
	}
	m, err := decodeMessage(body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%w: %w", model.ErrCorruptRecord, err)
	}
	return group, m, nil, nil
}

// writeLoop sends a peer's queued messages, batching what is queued into
// one flush, and a keepalive when idle.
func (t *TCPTransport) writeLoop(ctx context.Context, p *peer) {
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	var buf []byte
	for {
		var first frame
		var alive bool
		select {
		case <-ctx.Done():
			return
		case first = <-p.sendCh:
		case <-tick.C:
			alive = true
		}
		conn, _ := p.current()
		if conn == nil {
			if !alive {
				t.drain(p)
			}
			continue
		}
		buf = buf[:0]
		var err error
		if alive {
			buf = appendFrame(buf, keepaliveGroup, nil)
		} else {
			buf, err = appendMessage(buf, first)
			for n := 0; err == nil && n < 1024 && len(buf) < 4<<20; n++ {
				select {
				case f := <-p.sendCh:
					buf, err = appendMessage(buf, f)
					continue
				default:
				}
				break
			}
		}
		if err != nil {
			t.log.Error("encode raft message", "err", err)
			continue
		}
		_ = conn.SetWriteDeadline(time.Now().Add(silentPeer))
		if _, err := conn.Write(buf); err != nil {
			t.log.Debug("send to peer", "peer", p.id, "err", err)
			p.dropConn(conn)
			t.unreachable(p.id)
		}
		if cap(buf) > 8<<20 {
			buf = nil
		}
	}
}

// drain drops what is queued for an unconnected peer.
func (t *TCPTransport) drain(p *peer) {
	for {
		select {
		case <-p.sendCh:
		default:
			t.unreachable(p.id)
			return
		}
	}
}

// appendMessage encodes a message as a frame at the end of buf, straight
// into buf (the writer's buffer is kept between writes: a message's
// entries are copied once, into warm memory).
func appendMessage(buf []byte, f frame) ([]byte, error) {
	if f.msg == nil {
		return appendFrame(buf, f.group, f.raw), nil
	}
	start := len(buf)
	buf = append(buf, make([]byte, frameHeader)...)
	buf, err := proto.MarshalOptions{}.MarshalAppend(buf, f.msg)
	if err != nil {
		return buf[:start], err
	}
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
	binary.BigEndian.PutUint16(buf[start+4:], uint16(f.group))
	return buf, nil
}

func appendFrame(buf []byte, group model.GroupID, body []byte) []byte {
	var h [frameHeader]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(body)+2))
	binary.BigEndian.PutUint16(h[4:], uint16(group))
	buf = append(buf, h[:]...)
	return append(buf, body...)
}

// readLoop delivers a connection's messages until it fails or is silent
// for too long.
func (t *TCPTransport) readLoop(ctx context.Context, p *peer, conn net.Conn) {
	defer t.failCalls(p.id)
	defer p.dropConn(conn)
	r := bufio.NewReaderSize(conn, 64<<10)
	var scratch []byte
	for ctx.Err() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(silentPeer))
		group, m, call, err := readFrame(r, &scratch)
		if err == nil && group == callGroup {
			err = t.deliverCall(ctx, p, call)
		}
		if err != nil {
			if errors.Is(err, model.ErrCorruptRecord) {
				t.log.Warn("bad frame from peer; dropping the connection", "peer", p.id, "err", err)
			} else {
				t.log.Debug("peer connection ended", "peer", p.id, "err", err)
			}
			if ctx.Err() == nil && processGone(err) {
				t.peerGone(p.id)
			}
			return
		}
		if m == nil {
			continue // keepalive or call
		}
		if model.NodeID(m.GetFrom()) != p.id {
			t.log.Warn("raft message with a forged sender", "peer", p.id, "from", m.GetFrom())
			return
		}
		t.mu.Lock()
		g := t.groups[group]
		t.mu.Unlock()
		if g != nil {
			g.Deliver(m)
		}
	}
}
