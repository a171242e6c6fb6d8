package storage

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rosettamq/rosetta/internal/model"
)

// RetentionResult says what one retention pass did.
type RetentionResult struct {
	DeletedSegments int
	MovedQueues     int
	LogStart        model.LogPos
}

// EnforceRetention applies the broker-wide time and size limits, then deletes
// every whole segment that no queue still needs. Per-queue limits are applied
// by the broker through SetStartOffset before this runs.
func (e *Engine) EnforceRetention() (RetentionResult, error) {
	var res RetentionResult
	segs := e.clog.Segments()
	var total int64
	for _, s := range segs {
		total += int64(s.End - s.Base)
	}
	now := e.cfg.Now().UnixMilli()
	cut := segs[0].Base
	for _, s := range segs {
		if !s.Sealed {
			break
		}
		expiredTime := e.cfg.RetentionTime > 0 && s.LastTime < now-e.cfg.RetentionTime.Milliseconds()
		expiredSize := e.cfg.RetentionBytes > 0 && total > e.cfg.RetentionBytes
		if !expiredTime && !expiredSize {
			break
		}
		cut = s.End
		total -= int64(s.End - s.Base)
	}
	e.qmu.RLock()
	list := make([]*queue, 0, len(e.queues))
	for _, q := range e.queues {
		list = append(list, q)
	}
	e.qmu.RUnlock()
	need := e.clog.End()
	var errs []error
	for _, q := range list {
		first, ok := q.idx.First()
		if !ok {
			continue
		}
		if first.Pos < cut {
			next := q.idx.NextOffset()
			if _, ent, err := q.idx.LookupPos(cut); err == nil {
				next = ent.BaseOffset
			}
			if err := q.idx.SetStart(next); err != nil {
				errs = append(errs, err)
				continue
			}
			res.MovedQueues++
			if first, ok = q.idx.First(); !ok {
				continue
			}
		}
		need = min(need, first.Pos)
	}
	n, err := e.clog.DeleteBefore(need)
	if err != nil {
		errs = append(errs, err)
	}
	res.DeletedSegments = n
	e.stats.DeletedSegments.Add(int64(n))
	res.LogStart = e.clog.Start()
	e.keys.DeleteBefore(res.LogStart)
	if n > 0 {
		e.log.Info("retention deleted segments", "segments", n, "log_start", res.LogStart, "queues_moved", res.MovedQueues)
	}
	return res, errors.Join(errs...)
}

// DiskUsage describes the data disk.
type DiskUsage struct {
	Total, Free, Reserve int64
	Full                 bool
}

// DiskUsage reads the data disk's usage.
func (e *Engine) DiskUsage() (DiskUsage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(e.cfg.Dir, &st); err != nil {
		return DiskUsage{}, fmt.Errorf("statfs: %w", err)
	}
	u := DiskUsage{Total: int64(st.Blocks) * int64(st.Bsize), Free: int64(st.Bavail) * int64(st.Bsize)}
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
func (e *Engine) checkDiskNow() error {
	e.checkDisk()
	if e.diskFull.Load() {
		return model.ErrDiskFull
	}
	return nil
}
