package storage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/rosettamq/rosetta/internal/model"
)

// Index entries are changed in place (garbage collection moving them,
// compaction rewriting or punching them) between checkpoints. The index
// files may then hold changes the last checkpoint's live-byte figures do
// not: before a queue's first such change after a checkpoint its id is
// added, durably, to the in-place file, and recovery recounts the queues
// named there. A checkpoint empties the file.

const inPlaceName = "index-inplace"

// noteInPlace records that queue q's index is about to change in place;
// the checkpoint lock is held.
func (e *Engine) noteInPlace(q *queue) error {
	id := q.idx.ID()
	if e.inPlace[id] {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(e.cfg.Dir, inPlaceName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("in-place index changes: %w", err)
	}
	_, err = fmt.Fprintln(f, uint32(id))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("in-place index changes: %w", err)
	}
	if e.inPlace == nil {
		e.inPlace = map[model.QueueID]bool{}
	}
	e.inPlace[id] = true
	return nil
}

// clearInPlace empties the file once a checkpoint covers the changes; the
// checkpoint lock is held.
func (e *Engine) clearInPlace() {
	if len(e.inPlace) == 0 {
		return
	}
	if err := os.Remove(filepath.Join(e.cfg.Dir, inPlaceName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Warn("clearing the in-place index change list failed", "err", err)
		return
	}
	clear(e.inPlace)
}

// readInPlace lists the queues changed in place since the last checkpoint.
func readInPlace(dir string) []model.QueueID {
	f, err := os.Open(filepath.Join(dir, inPlaceName))
	if err != nil {
		return nil
	}
	defer f.Close()
	var ids []model.QueueID
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if n, err := strconv.ParseUint(sc.Text(), 10, 32); err == nil {
			ids = append(ids, model.QueueID(n))
		}
	}
	return ids
}
