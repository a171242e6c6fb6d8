package storage

import (
	"context"
	"encoding/binary"
	"fmt"
	"regexp"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// Retention in the bucket. Per-queue retention (topic policy, DeleteRecords,
// queue deletion) and compaction change what queues retain as they do
// locally; an object that no queue retains anything in is dropped from the
// manifest by a tier drop record (control op opTierDrop of queue 0,
// committed like a tier commit), and then deleted by the sweep. The sweep,
// which only the leader runs, deletes every object under the group's
// prefix that has Rosetta's key form, is not in the manifest and is older
// than the grace period: dropped objects, uploads of deposed leaders whose
// commit never came, and uploads whose commit was lost with a crash — and
// aborts multipart uploads older than the grace period. Objects of any other
// form are left alone.
//
// Record payload: op | count u32 | base i64 × count.

// opTierDrop is the control op that drops tiered segments from the manifest.
const opTierDrop = 8

// tierKeyForm is the form of the keys uploadSegment writes (after the
// prefix): the segment's first record index and the uploader's term.
var tierKeyForm = regexp.MustCompile(`^[0-9]{20}-[0-9]+$`)

// tierDropPayload is the control payload dropping the segments at bases.
func tierDropPayload(bases []model.LogPos) []byte {
	b := binary.LittleEndian.AppendUint32([]byte{opTierDrop}, uint32(len(bases)))
	for _, base := range bases {
		b = binary.LittleEndian.AppendUint64(b, uint64(base))
	}
	return b
}

// drop removes the segments a tier drop payload names.
func (m *tierManifest) drop(payload []byte) error {
	if len(payload) < 5 || payload[0] != opTierDrop {
		return fmt.Errorf("%w: tier drop payload", model.ErrCorruptRecord)
	}
	n := int(binary.LittleEndian.Uint32(payload[1:]))
	if len(payload) != 5+8*n {
		return fmt.Errorf("%w: tier drop payload of %d bytes for %d segments", model.ErrCorruptRecord, len(payload), n)
	}
	gone := map[model.LogPos]bool{}
	for i := range n {
		gone[model.LogPos(binary.LittleEndian.Uint64(payload[5+8*i:]))] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.segs[:0]
	for _, s := range m.segs {
		if !gone[s.Base] {
			kept = append(kept, s)
		}
	}
	clear(m.segs[len(kept):])
	m.segs = kept
	return nil
}

// expiredTiered lists the tiered segments no longer on local disk that no
// queue retains anything in: retention moved the starts of its queues past
// it, its queues were deleted, or compaction superseded every record of it
// (the same live-byte figures that decide a local segment's deletion;
// index entries keep counting in a segment after its file is gone).
func (e *Engine) expiredTiered() []model.LogPos {
	local := map[model.LogPos]bool{}
	for _, s := range e.clog.Segments() {
		local[s.Base] = true
	}
	live := e.liveBytes()
	var out []model.LogPos
	for _, s := range e.manifest.list() {
		if !local[s.Base] && live[s.Base] == 0 {
			out = append(out, s.Base)
		}
	}
	return out
}

// DropExpiredTiered commits the drop of the tiered segments nothing retains
// any more (on the leader; the sweep deletes their objects). It returns
// how many it dropped.
func (e *Engine) DropExpiredTiered(ctx context.Context) (int, error) {
	if e.cfg.Replicated && !e.clog.Writable() {
		return 0, nil
	}
	bases := e.expiredTiered()
	if len(bases) == 0 {
		return 0, nil
	}
	if err := e.writeTierRecord(ctx, tierDropPayload(bases)); err != nil {
		return 0, fmt.Errorf("drop tiered segments: %w", err)
	}
	e.log.Info("expired tiered segments dropped", "segments", len(bases))
	return len(bases), nil
}

// SweepResult says what a sweep of the bucket did.
type SweepResult struct {
	Deleted        int `json:"deleted_objects"`
	AbortedUploads int `json:"aborted_uploads"`
	Foreign        int `json:"foreign_objects"` // left alone: not of Rosetta's key form
}

// SweepBucket deletes the objects under the group's prefix that the
// manifest does not name and that are older than grace, and aborts older
// multipart uploads. Only a leader that has applied every record stored
// before its term sweeps: a commit it stored but has not applied yet must
// not look like an orphan.
func (e *Engine) SweepBucket(ctx context.Context, grace time.Duration) (SweepResult, error) {
	var res SweepResult
	if e.tier == nil {
		return res, nil
	}
	if e.cfg.Replicated && !e.appliedAsLeader() {
		return res, nil
	}
	named := map[string]bool{}
	for _, s := range e.manifest.list() {
		named[s.Key] = true
	}
	prefix := e.tier.cfg.KeyPrefix
	cutoff := e.cfg.Now().Add(-grace)
	var orphans []string
	err := e.tier.cfg.Bucket.List(ctx, prefix, func(o tier.ObjectInfo) bool {
		switch {
		case !tierKeyForm.MatchString(o.Key[len(prefix):]):
			res.Foreign++
		case !named[o.Key] && o.Modified.Before(cutoff):
			orphans = append(orphans, o.Key)
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if len(orphans) > 0 {
		if err := e.tier.cfg.Bucket.Delete(ctx, orphans...); err != nil {
			return res, err
		}
		res.Deleted = len(orphans)
		e.log.Info("bucket sweep deleted objects the manifest does not name", "objects", len(orphans), "first", orphans[0])
	}
	res.AbortedUploads, err = e.tier.cfg.Bucket.AbortUploads(ctx, prefix, cutoff)
	return res, err
}
