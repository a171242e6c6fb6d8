package storage

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// copyImage moves an open image into dir as a replica fetching it would:
// file by file, in chunks, then installs it.
func copyImage(t *testing.T, im *Image, dir string) {
	t.Helper()
	w, err := NewImageWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 7000)
	for i, f := range im.Files {
		if f.Size == 0 {
			if err := w.Write(f.Path, nil); err != nil {
				t.Fatal(err)
			}
		}
		for off := int64(0); off < f.Size; {
			n, err := im.ReadAt(i, buf, off)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if err := w.Write(f.Path, buf[:n]); err != nil {
				t.Fatal(err)
			}
			off += int64(n)
		}
	}
	if err := w.Complete(); err != nil {
		t.Fatal(err)
	}
	if ok, err := InstallImage(dir); err != nil || !ok {
		t.Fatalf("install: %v %v", ok, err)
	}
	for _, name := range []string{imagePending, imageInstalled} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Fatalf("%s left behind: %v", name, err)
		}
	}
}

// TestImageInstalls: an engine whose log start moved (garbage collection
// deleted the segments its dead records were in) is imaged while appends
// go on; another engine directory, with files of its own, installs the
// image and opens on it: the same queues, offsets and records, its own
// identity, and it keeps working.
func TestImageInstalls(t *testing.T) {
	src := openEngine(t, testConfig(t.TempDir()))
	defer src.Close()
	mixedLog(t, src, 3000)
	if _, err := src.GC(context.Background(), 0.5); err != nil {
		t.Fatal(err)
	}
	if src.LogStats().FirstIndex <= 1 {
		t.Fatalf("garbage collection kept the log's start: %+v", src.LogStats())
	}
	im, err := src.OpenImage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// After the image: not in it.
	_ = src.CreateQueue(context.Background(), 3)
	appendN(t, src, 3, 0, 50)

	dstDir := t.TempDir()
	old := openEngine(t, testConfig(dstDir))
	_ = old.CreateQueue(context.Background(), 9)
	appendN(t, old, 9, 0, 10) // the replica's own, replaced
	id := old.Identity()
	old.Close()
	copyImage(t, im, dstDir)
	im.Close()

	dst := openEngine(t, testConfig(dstDir))
	defer dst.Close()
	if got := dst.Identity(); got.ClusterID != id.ClusterID || got.Incarnation != id.Incarnation+1 {
		t.Fatalf("identity %+v, want the replica's own %+v", dst.Identity(), id)
	}
	checkKept(t, dst, 300)
	for _, q := range []int{1, 2} {
		s1, h1, _, err1 := src.Offsets(modelQueue(q))
		s2, h2, _, err2 := dst.Offsets(modelQueue(q))
		if err1 != nil || err2 != nil || s1 != s2 || h1 != h2 {
			t.Fatalf("queue %d: source %d..%d (%v), installed %d..%d (%v)", q, s1, h1, err1, s2, h2, err2)
		}
	}
	for _, q := range []model.QueueID{3, 9} {
		if _, _, _, err := dst.Offsets(q); err == nil {
			t.Fatalf("queue %d is in the installed image", q)
		}
	}
	appendN(t, dst, 2, 300, 5)
	dst.Close()
	again := openEngine(t, testConfig(dstDir))
	defer again.Close()
	if got := readAll(t, again, 2, 295); len(got) != 10 {
		t.Fatalf("read %d records of queue 2 from 295 after a restart, want 10", len(got))
	}
}

func modelQueue(q int) model.QueueID { return model.QueueID(q) }

// FuzzImageWriterPath: whatever path an image's manifest names (it comes
// from another member), the writer writes inside its directory or refuses.
func FuzzImageWriterPath(f *testing.F) {
	for _, s := range []string{"log/00000000000000000000.log", "../identity", "/etc/passwd", "index/../../x", "COMPLETE", "a/./b", "", "."} {
		f.Add(s)
	}
	root := f.TempDir()
	f.Fuzz(func(t *testing.T, path string) {
		dir := filepath.Join(root, "engine")
		w, err := NewImageWriter(dir)
		if err != nil {
			t.Fatal(err)
		}
		werr := w.Write(path, []byte("x"))
		serr := w.Skip(path, 1)
		outside := false
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(p, filepath.Join(dir, imagePending)+string(filepath.Separator)) {
				outside = true
			}
			return nil
		})
		if outside {
			t.Fatalf("path %q (write %v, skip %v) wrote outside the pending image", path, werr, serr)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	})
}
