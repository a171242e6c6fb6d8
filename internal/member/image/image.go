// Package image moves an image of a group's storage engine from the
// group's leader to a replica that needs records the leader's log no
// longer holds (retention or garbage collection deleted them, or the
// replica's disk was replaced). Raft then sends the replica a snapshot that
// names the leader; the replica fetches the image over the replication
// transport (Fetch), file by file in chunks, leaves it complete beside its
// own files and restarts; its engine installs it as it opens (Install) and
// catches up from the leader's log after it. The leader (Server) holds an
// image open while it is read — its engine goes on working and deleting
// segments meanwhile — and closes it when the fetcher is done or silent.
//
//	replica                                 leader
//	ImageOpen {group}              ──▶      OpenImage: manifest (files, index, membership)
//	ImageRead {id, file, off, len} ──▶      bytes, or "n zero bytes" (preallocated files)
//	… every file, in 4 MiB chunks …
//	ImageClose {id, done}          ──▶      ReportSnapshot(replica, done)
//	restart: Install, then the log after the image
package image

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/member/peer"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// chunk is how many bytes one read call carries.
const chunk = 4 << 20

// The kinds of a chunk's answer.
const (
	chunkBytes byte = 0 // the bytes follow
	chunkZeros byte = 1 // a u64: that many zero bytes
)

// idle closes an image nobody read for this long: its fetcher died, or
// restarted to install another group's image. Raft sends that replica no
// other snapshot until the image is closed (reported failed), so the wait
// is short; a live fetch reads a chunk at least every second or so.
const idle = 5 * time.Second

// call is the body of every image call.
type call struct {
	Group int    `json:"g,omitempty"`
	ID    uint64 `json:"id,omitempty"`
	File  int    `json:"f,omitempty"`
	Off   int64  `json:"o,omitempty"`
	Len   int    `json:"n,omitempty"`
	Done  bool   `json:"d,omitempty"`
}

// manifest answers ImageOpen.
type manifest struct {
	ID    uint64              `json:"id"`
	Index model.Index         `json:"index"`
	Files []storage.ImageFile `json:"files"`
	// Members: the group's membership as the leader applied it when the
	// image was made (the fetching replica starts from it).
	Members replication.Membership `json:"members"`
}

// Server serves images of the groups this member leads.
type Server struct {
	self model.NodeID
	// replica is this member's replica of group g (nil: none).
	replica func(g int) *replication.Group
	// served is told of an image a replica fetched whole.
	served func(g int)
	log    *slog.Logger

	mu   sync.Mutex
	next uint64
	open map[uint64]*lease
}

type lease struct {
	im    *storage.Image
	group int
	node  model.NodeID
	idle  *time.Timer
}

// NewServer answers p's image calls for the groups whose replica says this
// member leads them; served counts images fetched whole.
func NewServer(p *peer.Peers, self model.NodeID, replica func(g int) *replication.Group, served func(g int), log *slog.Logger) *Server {
	s := &Server{self: self, replica: replica, served: served, log: log, open: map[uint64]*lease{}}
	for _, m := range []peer.Method{peer.ImageOpen, peer.ImageRead, peer.ImageClose} {
		p.HandleRaw(m, func(ctx context.Context, from model.NodeID, body []byte) ([]byte, error) {
			return s.answer(ctx, from, m, body)
		})
	}
	return s
}

// answer answers another member's image call.
func (s *Server) answer(ctx context.Context, from model.NodeID, method peer.Method, body []byte) ([]byte, error) {
	var c call
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("image call from member %d: %w", from, err)
	}
	switch method {
	case peer.ImageOpen:
		g := s.replica(c.Group)
		if g == nil {
			return nil, fmt.Errorf("%w: group %d", model.ErrNotLeader, c.Group)
		}
		if leader, _ := g.Leader(); leader != s.self {
			return nil, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group)
		}
		// The membership first: the image then holds at least what it was
		// applied from.
		members := g.Membership(ctx)
		im, err := g.Engine().OpenImage(ctx)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.next++
		id := s.next
		l := &lease{im: im, group: c.Group, node: from}
		l.idle = time.AfterFunc(idle, func() { s.close(id, false) })
		s.open[id] = l
		s.mu.Unlock()
		s.log.Info("serving an image of the group to a replica", "group", c.Group, "member", from, "index", im.Index, "files", len(im.Files))
		return json.Marshal(manifest{ID: id, Index: im.Index, Files: im.Files, Members: members})
	case peer.ImageRead:
		s.mu.Lock()
		l := s.open[c.ID]
		s.mu.Unlock()
		if l == nil || l.node != from {
			return nil, fmt.Errorf("no image %d open for member %d", c.ID, from)
		}
		l.idle.Reset(idle)
		// A chunk answers with a kind byte: its bytes, or how many zero
		// bytes it holds (preallocated files are mostly zeros).
		buf := make([]byte, 1+min(max(c.Len, 0), chunk))
		n, err := l.im.ReadAt(c.File, buf[1:], c.Off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if n > 0 && allZero(buf[1:1+n]) {
			return binary.BigEndian.AppendUint64([]byte{chunkZeros}, uint64(n)), nil
		}
		buf[0] = chunkBytes
		return buf[:1+n], nil
	case peer.ImageClose:
		s.close(c.ID, c.Done)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown image call %s", method)
}

// close releases an image; when its replica fetched it whole, the group's
// Raft learns the snapshot arrived (it then streams the entries after it
// once the replica restarted).
func (s *Server) close(id uint64, fetched bool) {
	s.mu.Lock()
	l := s.open[id]
	delete(s.open, id)
	s.mu.Unlock()
	if l == nil {
		return
	}
	l.idle.Stop()
	l.im.Close()
	if g := s.replica(l.group); g != nil {
		g.ReportSnapshot(l.node, fetched)
		if fetched {
			s.served(l.group)
		}
	}
	s.log.Info("image closed", "group", l.group, "member", l.node, "fetched", fetched)
}

// Fetch fetches group g's image from member from into the engine
// directory dir, complete for Install, and returns the membership its
// manifest names.
func Fetch(ctx context.Context, p *peer.Peers, g model.GroupID, dir string, from model.NodeID, log *slog.Logger) (replication.Membership, error) {
	do := func(method peer.Method, c call, timeout time.Duration) ([]byte, error) {
		body, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		return p.CallRaw(ctx, from, method, body, timeout)
	}
	start := time.Now()
	out, err := do(peer.ImageOpen, call{Group: int(g)}, 2*time.Minute)
	if err != nil {
		return replication.Membership{}, err
	}
	var m manifest
	if err := json.Unmarshal(out, &m); err != nil {
		return replication.Membership{}, fmt.Errorf("image manifest: %w", err)
	}
	fetched := false
	defer func() {
		_, _ = do(peer.ImageClose, call{ID: m.ID, Done: fetched}, peer.Timeout)
	}()
	w, err := storage.NewImageWriter(dir)
	if err != nil {
		return m.Members, err
	}
	var total int64
	for i, f := range m.Files {
		if err := w.Write(f.Path, nil); err != nil {
			return m.Members, err
		}
		for off := int64(0); off < f.Size; {
			b, err := do(peer.ImageRead, call{ID: m.ID, File: i, Off: off, Len: chunk}, 30*time.Second)
			if err != nil {
				return m.Members, err
			}
			var n int64
			switch {
			case len(b) == 9 && b[0] == chunkZeros:
				n = int64(binary.BigEndian.Uint64(b[1:]))
				if n <= 0 || n > f.Size-off {
					return m.Members, fmt.Errorf("image file %s: %d zero bytes at %d of %d", f.Path, n, off, f.Size)
				}
				err = w.Skip(f.Path, n)
			case len(b) > 1 && b[0] == chunkBytes:
				n = int64(len(b) - 1)
				total += n
				err = w.Write(f.Path, b[1:])
			default:
				return m.Members, fmt.Errorf("image file %s ends at %d of %d", f.Path, off, f.Size)
			}
			if err != nil {
				return m.Members, err
			}
			off += n
		}
	}
	if err := w.Complete(); err != nil {
		return m.Members, err
	}
	fetched = true
	log.Info("image fetched", "group", g, "from", from, "index", m.Index, "files", len(m.Files), "bytes", total,
		"took", time.Since(start).Round(time.Millisecond))
	return m.Members, nil
}

// Install installs the image of group g fetched before the last stop in
// its engine directory dir, before the engine opens; true when there was
// one.
func Install(dir string, g model.GroupID, log *slog.Logger) (bool, error) {
	ok, err := storage.InstallImage(dir)
	if err != nil {
		return false, fmt.Errorf("group %d: install the fetched snapshot: %w", g, err)
	}
	if ok {
		log.Warn("installed the snapshot fetched from the group's leader", "group", g, "dir", dir)
	}
	return ok, nil
}

// allZero reports whether b holds zero bytes only.
func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
