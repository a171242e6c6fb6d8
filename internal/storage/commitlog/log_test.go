package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
)

type seqAssigner struct {
	next map[model.QueueID]model.QueueOffset
}

func (a *seqAssigner) Done() {}

func (a *seqAssigner) Assign(e *Entry) {
	e.BaseOffset = a.next[e.Queue]
	a.next[e.Queue] += model.QueueOffset(e.Count)
}

func openTest(t *testing.T, dir string, seg int64, mode SyncMode, rec Recovery, visit func(model.LogPos, *Record) error) *Log {
	t.Helper()
	l, err := Open(Options{Dir: dir, SegmentSize: seg, Mode: mode}, rec, visit)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func payload(i int) []byte {
	return []byte(fmt.Sprintf("payload-%06d-%s", i, bytes.Repeat([]byte{'x'}, i%50)))
}

func TestAppendReadAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, 4096, SyncAlways, Recovery{}, nil)
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	var entries []*Entry
	for i := 0; i < 500; i++ {
		e := &Entry{Queue: model.QueueID(i % 3), Count: 1, Payload: payload(i), Keys: []Key{{Key: []byte(fmt.Sprint("k", i))}}}
		entries = append(entries, e)
		end, err := l.Append([]*Entry{e}, a)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.WaitSynced(context.Background(), end); err != nil {
			t.Fatal(err)
		}
	}
	if l.SegmentCount() < 5 {
		t.Fatalf("expected several segments, got %d", l.SegmentCount())
	}
	check := func(l *Log) {
		for i, e := range entries {
			r, v, err := l.ReadRecord(e.Pos)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if !bytes.Equal(r.Payload, payload(i)) || r.Queue != e.Queue || r.BaseOffset != e.BaseOffset || r.Index != model.Index(i+1) {
				t.Fatalf("record %d mismatch: %+v", i, r.Header)
			}
			v.Release()
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var seen int
	l = openTest(t, dir, 4096, SyncAlways, Recovery{}, func(model.LogPos, *Record) error { seen++; return nil })
	defer l.Close()
	if seen != len(entries) {
		t.Fatalf("recovery visited %d records, want %d", seen, len(entries))
	}
	if l.NextIndex() != model.Index(len(entries)+1) {
		t.Fatalf("next index %d", l.NextIndex())
	}
	check(l)
}

func TestGroupCommitConcurrent(t *testing.T) {
	l := openTest(t, t.TempDir(), 1<<20, SyncAlways, Recovery{}, nil)
	defer l.Close()
	var mu sync.Mutex
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	locked := assignFunc(func(e *Entry) { mu.Lock(); a.Assign(e); mu.Unlock() })
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				end, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: payload(i)}}, locked)
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.WaitSynced(context.Background(), end); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if a.next[1] != 1600 || l.Synced() != l.End() {
		t.Fatalf("offsets %d synced %d end %d", a.next[1], l.Synced(), l.End())
	}
}

type assignFunc func(*Entry)

func (f assignFunc) Assign(e *Entry) { f(e) }
func (f assignFunc) Done()           {}

// TestTornTail damages the end of the last segment in several ways; recovery
// must keep every record before the damage and drop the rest.
func TestTornTail(t *testing.T) {
	damages := map[string]func(data []byte, lastPos int64, lastLen int){
		"truncated": func(d []byte, p int64, n int) { clear(d[p+int64(n)/2:]) },
		"garbled":   func(d []byte, p int64, n int) { d[p+int64(n)-3] ^= 0xff },
		"length":    func(d []byte, p int64, n int) { d[p] = 0xff; d[p+1] = 0xff },
		"header":    func(d []byte, p int64, n int) { d[p+8] = 9 },
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l := openTest(t, dir, 1<<16, SyncAlways, Recovery{}, nil)
			a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
			var last *Entry
			for i := 0; i < 20; i++ {
				last = &Entry{Queue: 7, Count: 1, Payload: payload(i)}
				if _, err := l.Append([]*Entry{last}, a); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()
			path := filepath.Join(dir, segmentName(0))
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			damage(data, int64(last.Pos), int(last.Size))
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			var n int
			l = openTest(t, dir, 1<<16, SyncAlways, Recovery{}, func(_ model.LogPos, r *Record) error {
				if !bytes.Equal(r.Payload, payload(n)) {
					t.Fatalf("record %d differs", n)
				}
				n++
				return nil
			})
			if n != 19 {
				t.Fatalf("kept %d records, want 19", n)
			}
			if l.End() != last.Pos {
				t.Fatalf("end %d, want %d", l.End(), last.Pos)
			}
			// The log keeps working after the cut.
			e := &Entry{Queue: 7, Count: 1, Payload: []byte("after")}
			if _, err := l.Append([]*Entry{e}, a); err != nil {
				t.Fatal(err)
			}
			if e.Index != 20 || e.Pos != last.Pos {
				t.Fatalf("appended at index %d pos %d", e.Index, e.Pos)
			}
			l.Close()
			n = 0
			l = openTest(t, dir, 1<<16, SyncAlways, Recovery{}, func(model.LogPos, *Record) error { n++; return nil })
			l.Close()
			if n != 20 {
				t.Fatalf("after reopen %d records, want 20", n)
			}
		})
	}
}

func TestTruncateTo(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, 2048, SyncAlways, Recovery{}, nil)
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	var es []*Entry
	for i := 0; i < 100; i++ {
		e := &Entry{Queue: 1, Count: 1, Payload: payload(i)}
		es = append(es, e)
		if _, err := l.Append([]*Entry{e}, a); err != nil {
			t.Fatal(err)
		}
	}
	next, err := l.TruncateTo(es[40].Pos)
	if err != nil {
		t.Fatal(err)
	}
	if next != 41 || l.End() != es[40].Pos {
		t.Fatalf("next %d end %d", next, l.End())
	}
	if _, _, err := l.ReadRecord(es[60].Pos); err == nil {
		t.Fatal("read past truncation succeeded")
	}
	e := &Entry{Queue: 1, Count: 1, Payload: []byte("new")}
	if _, err := l.Append([]*Entry{e}, a); err != nil {
		t.Fatal(err)
	}
	l.Close()
	n := 0
	l = openTest(t, dir, 2048, SyncAlways, Recovery{}, func(model.LogPos, *Record) error { n++; return nil })
	defer l.Close()
	if n != 41 {
		t.Fatalf("%d records after truncate+reopen, want 41", n)
	}
}

func TestRecordTooLarge(t *testing.T) {
	l := openTest(t, t.TempDir(), 1024, SyncAsync, Recovery{}, nil)
	defer l.Close()
	_, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: make([]byte, 2000)}}, nil)
	if !errors.Is(err, model.ErrMessageTooLarge) {
		t.Fatalf("got %v", err)
	}
}

func TestDeleteBefore(t *testing.T) {
	l := openTest(t, t.TempDir(), 1024, SyncAlways, Recovery{}, nil)
	defer l.Close()
	var es []*Entry
	for i := 0; i < 100; i++ {
		e := &Entry{Queue: 1, Count: 1, Payload: payload(i)}
		es = append(es, e)
		end, _ := l.Append([]*Entry{e}, nil)
		_ = l.WaitSynced(context.Background(), end)
	}
	before := l.SegmentCount()
	v, err := l.Acquire(es[0].Pos)
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.DeleteBefore(es[50].Pos)
	if err != nil || n == 0 {
		t.Fatalf("deleted %d: %v", n, err)
	}
	// A held view still reads the deleted segment.
	if b, ok := v.Bytes(es[0].Pos, int(es[0].Size)); !ok || len(b) != int(es[0].Size) {
		t.Fatal("view lost its bytes")
	}
	v.Release()
	if l.SegmentCount() != before-n || l.Start() > es[50].Pos {
		t.Fatalf("segments %d start %d", l.SegmentCount(), l.Start())
	}
}

// TestLargePayloadsWrittenInPlace mixes payloads below and above the
// staging threshold, with and without a patched base offset, and reads them
// back after a reopen.
func TestLargePayloadsWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, 1<<20, SyncAlways, Recovery{}, nil)
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	var es []*Entry
	var want [][]byte
	for i := 0; i < 200; i++ {
		p := bytes.Repeat([]byte{byte(i)}, 100+(i%7)*3000)
		var flags uint16
		if i%2 == 0 {
			flags = FlagPayloadOffset
		}
		e := &Entry{Queue: 1, Count: 3, Flags: flags, Payload: append([]byte(nil), p...)}
		if i%3 == 0 && len(p) > 21 {
			// The caller knows the checksum of the payload's tail.
			e.PayloadTailFrom, e.PayloadTailCRC = 21, crc32.Checksum(p[21:], castagnoli)
		}
		es = append(es, e)
		want = append(want, p)
	}
	for i := 0; i < len(es); i += 10 {
		if _, err := l.Append(es[i:i+10], a); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	l = openTest(t, dir, 1<<20, SyncAlways, Recovery{}, nil)
	defer l.Close()
	for i, e := range es {
		r, v, err := l.ReadRecord(e.Pos)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got := r.Payload
		if e.Flags&FlagPayloadOffset != 0 {
			if int64(binary.BigEndian.Uint64(got)) != int64(e.BaseOffset) {
				t.Fatalf("record %d: base offset not patched", i)
			}
			if int32(binary.BigEndian.Uint32(got[12:])) != 0 {
				t.Fatalf("record %d: leader epoch of term 1 not patched", i)
			}
			copy(want[i][12:16], got[12:16])
			got, want[i] = got[8:], want[i][8:]
		}
		if !bytes.Equal(got, want[i]) {
			t.Fatalf("record %d differs", i)
		}
		v.Release()
	}
}

// TestDeferredAppend: in sync mode a deferred append asks for no fsync; it
// becomes durable with the next append that does, or on the flush tick.
func TestDeferredAppend(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, Mode: SyncAlways, FlushInterval: time.Hour}, Recovery{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	deferred, err := l.AppendDeferred([]*Entry{{Queue: 1, Count: 1, Payload: payload(1)}}, a)
	if err != nil {
		t.Fatal(err)
	}
	// In the file at once (a process crash keeps it), though not synced.
	if b, err := os.ReadFile(dir + "/" + segmentName(0)); err != nil || !bytes.Contains(b, payload(1)) {
		t.Fatalf("deferred append not in the file: %v", err)
	}
	time.Sleep(50 * time.Millisecond)
	if l.Synced() >= deferred {
		t.Fatal("a deferred append was synced on its own")
	}
	end, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: payload(2)}}, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitSynced(context.Background(), end); err != nil || l.Synced() < deferred {
		t.Fatalf("synced %d, deferred end %d: %v", l.Synced(), deferred, err)
	}

	ticked, err := Open(Options{Dir: t.TempDir(), SegmentSize: 1 << 20, Mode: SyncAlways, FlushInterval: 20 * time.Millisecond}, Recovery{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ticked.Close()
	end, err = ticked.AppendDeferred([]*Entry{{Queue: 1, Count: 1, Payload: payload(3)}}, &seqAssigner{next: map[model.QueueID]model.QueueOffset{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ticked.WaitSynced(ctx, end); err != nil {
		t.Fatalf("deferred append not synced by the flush tick: %v", err)
	}
}

// TestDeleteMiddleSegment: a sealed segment in the middle can be deleted;
// the rest stays readable, and reopening (even scanning from the start,
// across the gap) keeps every other segment.
func TestDeleteMiddleSegment(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, 1024, SyncAlways, Recovery{}, nil)
	a := &seqAssigner{next: map[model.QueueID]model.QueueOffset{}}
	var ends []model.LogPos
	for i := 0; i < 60; i++ {
		end, err := l.Append([]*Entry{{Queue: 1, Count: 1, Payload: payload(i)}}, a)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	l.Sync()
	segs := l.Segments()
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	victim := segs[1]
	if ok, err := l.DeleteSegment(victim.Base, victim.Base); ok || err != nil {
		t.Fatalf("deleted beyond the bound: %v %v", ok, err)
	}
	if ok, err := l.DeleteSegment(segs[len(segs)-1].Base, l.End()); ok || err != nil {
		t.Fatalf("deleted the active segment: %v %v", ok, err)
	}
	if ok, err := l.DeleteSegment(victim.Base, l.End()); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if _, _, err := l.ReadRecord(victim.Base); err == nil {
		t.Fatal("read from the deleted segment")
	}
	if _, _, err := l.ReadRecord(segs[2].Base); err != nil {
		t.Fatal(err)
	}
	end := l.End()
	l.Close()
	for _, from := range []model.LogPos{end, 0} {
		n := 0
		l = openTest(t, dir, 1024, SyncAlways, Recovery{Pos: from}, func(model.LogPos, *Record) error { n++; return nil })
		if got := len(l.Segments()); got != len(segs)-1 || l.End() != end {
			t.Fatalf("reopened from %d: %d segments (want %d), end %d (want %d)", from, got, len(segs)-1, l.End(), end)
		}
		if from == 0 && n == 0 {
			t.Fatal("nothing scanned")
		}
		l.Close()
	}
}
