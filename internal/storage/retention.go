package storage

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

// RetentionResult says what one retention pass did.
type RetentionResult struct {
	DeletedSegments int
	FreedBytes      int64
	MovedQueues     int // queues cut by the size guard
	LogStart        model.LogPos
}

// EnforceRetention deletes every sealed segment no queue retains anything
// in (its live bytes are 0), wherever it lies in the log: per-queue
// retention (topic policy, DeleteRecords, the broker's own trimming) has
// already moved queue starts. Before deleting, a checkpoint makes those
// start moves durable and puts recovery's starting point past the
// segments. Then, as a last resort, the broker-wide size limit
// (RetentionBytes) cuts the oldest segments whatever they hold.
func (e *Engine) EnforceRetention() (RetentionResult, error) {
	var res RetentionResult
	var errs []error
	deleted, freed, err := e.reclaimDead()
	res.DeletedSegments, res.FreedBytes = deleted, freed
	if err != nil {
		errs = append(errs, err)
	}
	deleted, freed, err = e.reclaimTiered(context.Background(), false)
	res.DeletedSegments += deleted
	res.FreedBytes += freed
	if err != nil {
		errs = append(errs, err)
	}
	if e.cfg.RetentionBytes > 0 {
		n, moved, freed, err := e.enforceSizeGuard()
		res.DeletedSegments += n
		res.MovedQueues += moved
		res.FreedBytes += freed
		if err != nil {
			errs = append(errs, err)
		}
	}
	res.LogStart = e.clog.Start()
	// Keys of records in the bucket stay findable.
	keysFrom := res.LogStart
	if segs := e.manifest.list(); len(segs) > 0 {
		keysFrom = min(keysFrom, segs[0].Base)
	}
	e.keys.DeleteBefore(keysFrom)
	if res.DeletedSegments > 0 {
		e.log.Info("retention deleted segments", "segments", res.DeletedSegments, "freed_bytes", res.FreedBytes,
			"log_start", res.LogStart, "queues_cut_by_size_guard", res.MovedQueues)
	}
	return res, errors.Join(errs...)
}

// reclaimDead deletes the sealed segments with no live bytes, after a
// checkpoint that makes what emptied them durable.
func (e *Engine) reclaimDead() (deleted int, freed int64, err error) {
	e.reclaimMu.Lock()
	defer e.reclaimMu.Unlock()
	dead := e.deadSegments()
	if len(dead) == 0 {
		return 0, 0, nil
	}
	if err := e.checkpoint(); err != nil {
		return 0, 0, err
	}
	// Keepers' state must outlive the records it came from.
	var deleting model.LogPos
	for _, u := range dead {
		if !u.Base.IsLocal() {
			deleting = max(deleting, u.End)
		}
	}
	if err := e.snapshotKeepers(context.Background(), min(deleting, e.lastCheckpoint())); err != nil {
		return 0, 0, err
	}
	live := e.liveBytes()
	var errs []error
	for _, u := range dead {
		if live[u.Base] != 0 {
			continue
		}
		ckpt := e.lastCheckpoint()
		if u.Base.IsLocal() {
			ckpt = model.LogPos(e.localCkpt.Load())
		}
		ok, err := e.logAt(u.Base).DeleteSegment(u.Base, ckpt)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			deleted++
			freed += int64(u.End - u.Base)
		}
	}
	e.stats.DeletedSegments.Add(int64(deleted))
	if deleted > 0 {
		e.checkDisk()
	}
	return deleted, freed, errors.Join(errs...)
}

// deadSegments lists the sealed segments with no live bytes.
func (e *Engine) deadSegments() []SegmentUsage {
	var dead []SegmentUsage
	for _, u := range e.Usage() {
		if u.Sealed && u.Live == 0 {
			dead = append(dead, u)
		}
	}
	return dead
}

// liveBytes sums every queue's live bytes by segment: its records and its
// pinned control records.
func (e *Engine) liveBytes() map[model.LogPos]int64 {
	live := map[model.LogPos]int64{}
	for _, q := range e.queueList() {
		for seg, n := range q.idx.Bytes() {
			live[seg] += n
		}
		q.pins.bytes(live, e.segmentBase, q.idx.StartOffset())
	}
	e.keeperPinBytes(live)
	return live
}

// enforceSizeGuard cuts the oldest sealed segments while the log is over
// RetentionBytes, moving the start of every queue with records in them
// past those records: data is lost, which is why it is only a guard.
func (e *Engine) enforceSizeGuard() (deleted, moved int, freed int64, err error) {
	segs := e.clog.Segments()
	total := e.local.Size()
	for _, s := range segs {
		total += int64(s.End - s.Base)
	}
	if total <= e.cfg.RetentionBytes {
		return 0, 0, 0, nil
	}
	cut := segs[0].Base
	for _, s := range segs {
		if !s.Sealed || total <= e.cfg.RetentionBytes {
			break
		}
		cut = s.End
		total -= int64(s.End - s.Base)
	}
	e.log.Warn("commit log over storage.retention_bytes: cutting the oldest segments whatever they hold",
		"limit", e.cfg.RetentionBytes, "cut_before", cut)
	// The cut is decided here but takes effect through start records, like
	// every other start move.
	starts := map[model.QueueID]model.QueueOffset{}
	for _, q := range e.queueList() {
		first, ok := q.idx.First()
		if !ok || first.Pos >= cut {
			continue
		}
		next := q.idx.NextOffset()
		if _, ent, err := q.idx.LookupPos(cut); err == nil {
			next = ent.BaseOffset
		}
		starts[q.idx.ID()] = next
	}
	var errs []error
	if err := e.SetStartOffsets(context.Background(), starts); err != nil {
		errs = append(errs, err)
	}
	moved = len(starts)
	if err := e.checkpoint(); err != nil {
		return 0, moved, 0, errors.Join(append(errs, err)...)
	}
	if err := e.snapshotKeepers(context.Background(), min(cut, e.lastCheckpoint())); err != nil {
		return 0, moved, 0, errors.Join(append(errs, err)...)
	}
	before := e.clog.Size()
	n, err := e.clog.DeleteBefore(min(cut, e.lastCheckpoint()))
	if err != nil {
		errs = append(errs, err)
	}
	e.stats.DeletedSegments.Add(int64(n))
	return n, moved, before - e.clog.Size(), errors.Join(errs...)
}

// DiskUsage describes the data disk.
type DiskUsage struct {
	Total, Free, Reserve int64
	Full                 bool
}

// DiskFull reports whether the disk guard refuses writes now (as of its
// last check).
func (e *Engine) DiskFull() bool { return e.diskFull.Load() }

// DiskUsage reads the data disk's usage.
func (e *Engine) DiskUsage() (DiskUsage, error) {
	var u DiskUsage
	if e.cfg.StatDisk != nil {
		var err error
		if u.Total, u.Free, err = e.cfg.StatDisk(); err != nil {
			return DiskUsage{}, err
		}
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(e.cfg.Dir, &st); err != nil {
			return DiskUsage{}, fmt.Errorf("statfs: %w", err)
		}
		u.Total, u.Free = int64(st.Blocks)*int64(st.Bsize), int64(st.Bavail)*int64(st.Bsize)
	}
	u.Reserve = max(e.cfg.MinFreeBytes, int64(e.cfg.MinFreeRatio*float64(u.Total)))
	u.Full = e.diskFull.Load()
	return u, nil
}

// checkDisk refreshes the disk-full flag. Appends are refused while less
// than the reserve plus one segment is free; reads go on.
func (e *Engine) checkDisk() {
	u, err := e.DiskUsage()
	if err != nil {
		e.log.Warn("disk check failed", "err", err)
		return
	}
	full := u.Free-e.cfg.SegmentSize < u.Reserve
	if was := e.diskFull.Swap(full); was != full {
		if full {
			e.log.Error("disk usage limit reached: refusing writes", "free", u.Free, "reserve", u.Reserve)
		} else {
			e.log.Info("disk space recovered: accepting writes", "free", u.Free)
		}
	}
}

// checkDiskNow is asked before a new segment is allocated.
// Garbage collection and tier records may roll into the reserve while a
// whole segment still fits: that is what the reserve is for (they free
// more than they take), so a broker at its guard can recover on its own.
// So may a replica storing its leader's records: the leader decides what
// the group writes (it refuses clients at its own guard), and a replica
// refusing records would stop it — the tier commits that free every
// replica's disk among them.
func (e *Engine) checkDiskNow() error {
	e.checkDisk()
	if e.diskFull.Load() {
		if e.gcRelocating.Load() || e.tierCommitting.Load() > 0 || e.replicaStoring.Load() > 0 {
			if u, err := e.DiskUsage(); err == nil && u.Free >= e.cfg.SegmentSize {
				return nil
			}
		}
		return model.ErrDiskFull
	}
	return nil
}
