package broker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestGroupImagesSurviveRestart: coordinator images written, replaced and
// removed come back the same from the checkpoint, from the log alone and
// after a snapshot trimmed the older records.
func TestGroupImagesSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	for _, w := range []struct {
		group string
		image []byte
	}{{"a", []byte("a1")}, {"b", []byte("b1")}, {"a", []byte("a2")}, {"gone", []byte("x")}, {"gone", nil}} {
		if err := f.b.PersistGroup(ctx, w.group, w.image); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		got := f.b.GroupImages()
		if len(got) != 2 || string(got["a"]) != "a2" || string(got["b"]) != "b1" {
			t.Fatalf("%s: images %q", when, got)
		}
	}
	check("live")
	f.close(t)
	f = open(t, dir)
	check("from the checkpoint")
	if err := f.b.groupImages.state.SnapshotAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.close(t)
	check("from the log alone, after a snapshot")
}

// FuzzDecodeGroupEntry: group state records and snapshot entries never
// panic, and what decodes encodes back to the same bytes.
func FuzzDecodeGroupEntry(f *testing.F) {
	f.Add(encodeGroupEntry(opGroupImage, "g", []byte{1, 2}), true)
	f.Add(encodeGroupEntry(opGroupGone, "g", nil), true)
	f.Add(encodeGroupEntry(0, "g", []byte{3})[1:], false)
	f.Fuzz(func(t *testing.T, b []byte, withOp bool) {
		op, g, image, err := decodeGroupEntry(b, withOp)
		if err != nil || len(g) > 0xffff {
			return
		}
		again := encodeGroupEntry(op, g, image)
		if !withOp {
			again = again[1:]
		}
		if string(again) != string(b) {
			t.Fatalf("re-encoded %x, decoded from %x", again, b)
		}
	})
}
