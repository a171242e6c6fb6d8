package producers

import (
	"testing"
)

// A producer's state exported from one manager and imported into another
// makes a batch it wrote before a duplicate there too, and its next batch
// follows on; a state the importer holds already is kept.
func TestExportImport(t *testing.T) {
	from, to := newTestManager(t, Options{}), newTestManager(t, Options{})
	st := from.Acquire(9, 77)
	st.Record(Batch{Epoch: 2, FirstSeq: 0, LastSeq: 4, BaseOffset: 10}, 1000)
	st.Record(Batch{Epoch: 2, FirstSeq: 5, LastSeq: 9, BaseOffset: 15}, 1001)
	st.Unlock()
	to.Import(9, from.Export(9))
	st = to.Acquire(9, 77)
	if off, dup, err := st.Check(2, 5, 9); err != nil || !dup || off != 15 {
		t.Fatalf("retried batch: offset %d, duplicate %v (%v)", off, dup, err)
	}
	if _, dup, err := st.Check(2, 10, 14); err != nil || dup {
		t.Fatalf("next batch: duplicate %v (%v)", dup, err)
	}
	st.Record(Batch{Epoch: 3, FirstSeq: 0, LastSeq: 0, BaseOffset: 40}, 2000)
	st.Unlock()
	to.Import(9, from.Export(9)) // older than what it holds
	st = to.Acquire(9, 77)
	defer st.Unlock()
	if st.epoch != 3 || len(st.batches) != 1 {
		t.Fatalf("import replaced a newer state: epoch %d, %d batches", st.epoch, len(st.batches))
	}
}
