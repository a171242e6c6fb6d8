package storage

import (
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
)

// ReplayedRecord is a data record read back from the log during recovery.
// Payload aliases the log and is valid only during the call.
type ReplayedRecord = commitlog.Record

// A StateKeeper keeps state derived from the records of the log (such as
// idempotent-producer sequences) and lets the engine make it exactly as
// durable as the log: its snapshot is written into every checkpoint, and on
// open the engine restores the last snapshot and replays every record after
// that checkpoint through it, so no acknowledged record's effect is lost and
// none is applied from a record the log no longer has.
type StateKeeper interface {
	// Name identifies the keeper's section in the checkpoint; stable across
	// versions.
	Name() string
	// Capture returns a snapshot reflecting at least every record whose
	// append returned before the call. It may reflect later records too.
	Capture() ([]byte, error)
	// Restore replaces the state with the snapshot of the last checkpoint
	// (an empty one: no state). It is called on open, before any Replay,
	// and not at all when there is none; and when the log is truncated,
	// before the records from the checkpoint to the cut are replayed.
	Restore(data []byte) error
	// Replay applies one data record written after the checkpoint, in log
	// order. It must tolerate records the snapshot already reflects.
	Replay(pos model.LogPos, r *ReplayedRecord)
}

// restoreKeepers hands each keeper its section of the checkpoint.
func restoreKeepers(keepers []StateKeeper, sections map[string][]byte) error {
	for _, k := range keepers {
		data, ok := sections[k.Name()]
		if !ok {
			continue
		}
		if err := k.Restore(data); err != nil {
			return fmt.Errorf("restore %s: %w", k.Name(), err)
		}
	}
	return nil
}
