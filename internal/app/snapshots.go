package app

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/replication"
	"github.com/rosettamq/rosetta/internal/storage"
)

// A replica that needs records its group's leader no longer holds
// (retention or garbage collection deleted them, or the replica's disk was
// replaced) fetches an image of the leader's engine (storage.Image) over
// the replication transport, file by file in chunks, leaves it complete
// beside its own files and restarts; the node installs it as it starts
// (storage.InstallImage) and catches up from the leader's log after it.

// Image calls between members.
const (
	callImageOpen  byte = 6 // group leader: open an image of the group's engine
	callImageRead  byte = 7 // a chunk of one of its files
	callImageClose byte = 8 // done with it (fetched, or given up)
)

// imageChunk is how many bytes one read call carries.
const imageChunk = 4 << 20

// The kinds of a chunk's answer.
const (
	chunkBytes byte = 0 // the bytes follow
	chunkZeros byte = 1 // a u64: that many zero bytes
)

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

// imageIdle closes an image nobody read for this long: its fetcher died,
// or restarted to install another group's image. Raft sends that replica
// no other snapshot until the image is closed (reported failed), so the
// wait is short; a live fetch reads a chunk at least every second or so.
const imageIdle = 5 * time.Second

// ErrRestartToInstall is what Run returns when this member fetched a
// snapshot of a group: start it again (the same process arguments) and it
// installs the snapshot.
var ErrRestartToInstall = replication.ErrRestartToInstall

// imageCall is the body of every image call.
type imageCall struct {
	Group int    `json:"g,omitempty"`
	ID    uint64 `json:"id,omitempty"`
	File  int    `json:"f,omitempty"`
	Off   int64  `json:"o,omitempty"`
	Len   int    `json:"n,omitempty"`
	Done  bool   `json:"d,omitempty"`
}

// imageManifest answers callImageOpen.
type imageManifest struct {
	ID    uint64              `json:"id"`
	Index model.Index         `json:"index"`
	Files []storage.ImageFile `json:"files"`
	// Members: the group's membership as the leader applied it when the
	// image was made (the fetching replica starts from it).
	Members replication.Membership `json:"members"`
}

// imageLeases are the images this member serves to fetching replicas.
type imageLeases struct {
	mu   sync.Mutex
	next uint64
	open map[uint64]*imageLease
}

type imageLease struct {
	im    *storage.Image
	group int
	node  model.NodeID
	idle  *time.Timer
}

// answerImage answers another member's image call for a group this
// member leads.
func (a *App) answerImage(ctx context.Context, from model.NodeID, method byte, body []byte) ([]byte, error) {
	var c imageCall
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("image call from member %d: %w", from, err)
	}
	r := a.replica
	l := &r.images
	switch method {
	case callImageOpen:
		if c.Group < 0 || c.Group >= len(r.groups) || r.groups[c.Group].hosted() == nil {
			return nil, nameCallError(fmt.Errorf("%w: group %d", model.ErrNotLeader, c.Group))
		}
		lr := r.groups[c.Group].hosted()
		if leader, _ := lr.raft.Leader(); leader != r.self {
			return nil, nameCallError(fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, c.Group))
		}
		// The membership first: the image then holds at least what
		// it was applied from.
		members := lr.raft.Membership(ctx)
		im, err := lr.engine.OpenImage(ctx)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.open == nil {
			l.open = map[uint64]*imageLease{}
		}
		l.next++
		id := l.next
		lease := &imageLease{im: im, group: c.Group, node: from}
		lease.idle = time.AfterFunc(imageIdle, func() { a.closeImage(id, false) })
		l.open[id] = lease
		l.mu.Unlock()
		a.log.Info("serving an image of the group to a replica", "group", c.Group, "member", from, "index", im.Index, "files", len(im.Files))
		return json.Marshal(imageManifest{ID: id, Index: im.Index, Files: im.Files, Members: members})
	case callImageRead:
		l.mu.Lock()
		lease := l.open[c.ID]
		l.mu.Unlock()
		if lease == nil || lease.node != from {
			return nil, fmt.Errorf("no image %d open for member %d", c.ID, from)
		}
		lease.idle.Reset(imageIdle)
		// A chunk answers with a kind byte: its bytes, or how many zero
		// bytes it holds (preallocated files are mostly zeros).
		buf := make([]byte, 1+min(max(c.Len, 0), imageChunk))
		n, err := lease.im.ReadAt(c.File, buf[1:], c.Off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if n > 0 && allZero(buf[1:1+n]) {
			return binary.BigEndian.AppendUint64([]byte{chunkZeros}, uint64(n)), nil
		}
		buf[0] = chunkBytes
		return buf[:1+n], nil
	case callImageClose:
		a.closeImage(c.ID, c.Done)
		return nil, nil
	}
	return nil, fmt.Errorf("unknown call method %d", method)
}

// closeImage releases an image; when its replica fetched it whole, the
// group's Raft learns the snapshot arrived (it then streams the entries
// after it once the replica restarted).
func (a *App) closeImage(id uint64, fetched bool) {
	r := a.replica
	r.images.mu.Lock()
	lease := r.images.open[id]
	delete(r.images.open, id)
	r.images.mu.Unlock()
	if lease == nil {
		return
	}
	lease.idle.Stop()
	lease.im.Close()
	gr := r.groups[lease.group]
	if lr := gr.hosted(); lr != nil {
		lr.raft.ReportSnapshot(lease.node, fetched)
		if fetched {
			gr.imagesServed.Add(1)
		}
	}
	a.log.Info("image closed", "group", lease.group, "member", lease.node, "fetched", fetched)
}

// fetchImage fetches group gr's image from member from into its engine's
// directory, complete for storage.InstallImage.
func (a *App) fetchImage(ctx context.Context, gr *groupReplica, lr *localReplica, from model.NodeID) (replication.Membership, error) {
	var members replication.Membership
	err := a.fetchImageFiles(ctx, gr, lr, from, &members)
	return members, err
}

// fetchImageFiles fetches the image's files and sets members to the
// membership its manifest names.
func (a *App) fetchImageFiles(ctx context.Context, gr *groupReplica, lr *localReplica, from model.NodeID, members *replication.Membership) error {
	t := a.replica.transport
	call := func(method byte, c imageCall, timeout time.Duration) ([]byte, error) {
		body, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		out, err := t.Call(cctx, from, method, body)
		if err != nil {
			return nil, callError(err)
		}
		return out, nil
	}
	start := time.Now()
	out, err := call(callImageOpen, imageCall{Group: int(gr.id)}, 2*time.Minute)
	if err != nil {
		return err
	}
	var m imageManifest
	if err := json.Unmarshal(out, &m); err != nil {
		return fmt.Errorf("image manifest: %w", err)
	}
	*members = m.Members
	fetched := false
	defer func() {
		_, _ = call(callImageClose, imageCall{ID: m.ID, Done: fetched}, callTimeout)
	}()
	w, err := storage.NewImageWriter(lr.engine.Config().Dir)
	if err != nil {
		return err
	}
	var total int64
	for i, f := range m.Files {
		if err := w.Write(f.Path, nil); err != nil {
			return err
		}
		for off := int64(0); off < f.Size; {
			chunk, err := call(callImageRead, imageCall{ID: m.ID, File: i, Off: off, Len: imageChunk}, 30*time.Second)
			if err != nil {
				return err
			}
			var n int64
			switch {
			case len(chunk) == 9 && chunk[0] == chunkZeros:
				n = int64(binary.BigEndian.Uint64(chunk[1:]))
				if n <= 0 || n > f.Size-off {
					return fmt.Errorf("image file %s: %d zero bytes at %d of %d", f.Path, n, off, f.Size)
				}
				err = w.Skip(f.Path, n)
			case len(chunk) > 1 && chunk[0] == chunkBytes:
				n = int64(len(chunk) - 1)
				total += n
				err = w.Write(f.Path, chunk[1:])
			default:
				return fmt.Errorf("image file %s ends at %d of %d", f.Path, off, f.Size)
			}
			if err != nil {
				return err
			}
			off += n
		}
	}
	if err := w.Complete(); err != nil {
		return err
	}
	fetched = true
	a.log.Info("image fetched", "group", gr.id, "from", from, "index", m.Index, "files", len(m.Files), "bytes", total,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// installImage installs the image of group g fetched before the last stop
// in its engine directory dir (before the engine opens).
func (a *App) installImage(dir string, g model.GroupID) error {
	ok, err := storage.InstallImage(dir)
	if err != nil {
		return fmt.Errorf("group %d: install the fetched snapshot: %w", g, err)
	}
	if ok {
		a.replica.groups[g].imagesInstalled.Add(1)
		a.log.Warn("installed the snapshot fetched from the group's leader", "group", g, "dir", dir)
	}
	return nil
}
