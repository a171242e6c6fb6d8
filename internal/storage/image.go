package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/rosettamq/rosetta/internal/model"
)

// An image is a copy of a replica's engine at a committed point — its
// checkpoint, index files, key index, local area and commit-log segments
// cut at the committed end — which a replica that needs records its
// leader no longer holds (retention and garbage collection deleted them)
// installs instead of the log it lacks: queue creations, start moves and
// compaction holes older than the log's start live only in the checkpoint
// and the local area. Installing replaces the replica's own files before
// its engine opens (InstallImage); the engine then recovers as after a
// restart, from the image's checkpoint.

// imageInstalled marks an engine directory whose own files are gone while
// an image moves in.
const imageInstalled = "image-installing"

// imagePending is where an image is assembled before it is installed.
const imagePending = "image.pending"

// imageComplete marks a pending image whose every file arrived.
const imageComplete = "COMPLETE"

// ImageFile is one file of an image: its path in the engine directory and
// how many bytes of it the image holds.
type ImageFile struct {
	Path string `json:"p"`
	Size int64  `json:"s"`
}

// Image is an open image of the engine: the files that change in place
// are copied aside when it is taken, the append-only ones (segments of the
// commit log and the local area) are held open, so the engine works on
// meanwhile and deleting a segment does not disturb the copy.
type Image struct {
	// Index is the last record index the image holds (committed).
	Index model.Index
	Term  model.Term
	Files []ImageFile
	dir   string              // the copied files
	open  map[string]*os.File // held segments, by path
}

var imageSeq atomic.Uint64

// OpenImage takes an image of the engine at its committed end. Close it
// when done.
func (e *Engine) OpenImage(ctx context.Context) (*Image, error) {
	// A fresh checkpoint keeps what recovery replays on the copy short.
	if err := e.checkpoint(); err != nil {
		return nil, fmt.Errorf("image: checkpoint: %w", err)
	}
	// No garbage collection, compaction or checkpoint changes files in
	// place while the mutable ones are copied.
	e.gcMu.Lock()
	defer e.gcMu.Unlock()
	e.ckptMu.Lock()
	defer e.ckptMu.Unlock()
	// Readers' end: a replica's committed end (the log's own on a node
	// alone).
	end, index := e.visible(), e.CommitIndex()
	if !e.cfg.Replicated {
		index = e.clog.LastIndex()
	}
	im := &Image{Index: index, open: map[string]*os.File{},
		dir: filepath.Join(e.cfg.Dir, "image-"+strconv.FormatUint(imageSeq.Add(1), 10)+".tmp")}
	if im.Index > 0 {
		t, err := e.TermAt(im.Index)
		if err != nil {
			return nil, fmt.Errorf("image: term of %d: %w", im.Index, err)
		}
		im.Term = t
	}
	fail := func(err error) (*Image, error) {
		im.Close()
		return nil, fmt.Errorf("image: %w", err)
	}
	for _, name := range []string{checkpointName, inPlaceName, "index", "keys"} {
		if err := im.copyAside(e.cfg.Dir, name); err != nil {
			return fail(err)
		}
	}
	for _, area := range []struct {
		dir string
		end model.LogPos // 0: all of it
	}{{"log", end}, {"local", 0}} {
		if err := im.holdSegments(e.cfg.Dir, area.dir, area.end); err != nil {
			return fail(err)
		}
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	return im, nil
}

// copyAside copies a file or directory of the engine into the image.
func (im *Image) copyAside(root, name string) error {
	src := filepath.Join(root, name)
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		n, err := copyFile(path, filepath.Join(im.dir, rel))
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted meanwhile (a queue's files)
		}
		if err != nil {
			return err
		}
		im.Files = append(im.Files, ImageFile{Path: filepath.ToSlash(rel), Size: n})
		return nil
	})
}

func copyFile(from, to string) (int64, error) {
	src, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return 0, err
	}
	dst, err := os.Create(to)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// holdSegments opens an area's segments (up to end when it is set) for
// the image.
func (im *Image) holdSegments(root, area string, end model.LogPos) error {
	entries, err := os.ReadDir(filepath.Join(root, area))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, d := range entries {
		base, err := strconv.ParseInt(strings.TrimSuffix(d.Name(), ".log"), 10, 64)
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".log") || err != nil {
			continue
		}
		if end > 0 && model.LogPos(base) >= end {
			continue
		}
		rel := area + "/" + d.Name()
		f, err := os.Open(filepath.Join(root, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted meanwhile (before the log's start)
		}
		if err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		size := st.Size()
		if end > 0 {
			size = min(size, int64(end)-base)
		}
		im.open[rel] = f
		im.Files = append(im.Files, ImageFile{Path: rel, Size: size})
	}
	return nil
}

// ReadAt reads up to len(p) bytes of file i at off (io.EOF past its size).
func (im *Image) ReadAt(i int, p []byte, off int64) (int, error) {
	if i < 0 || i >= len(im.Files) {
		return 0, fmt.Errorf("image: no file %d", i)
	}
	f := im.Files[i]
	if off >= f.Size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), f.Size-off)]
	if h, ok := im.open[f.Path]; ok {
		return h.ReadAt(p, off)
	}
	h, err := os.Open(filepath.Join(im.dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return 0, err
	}
	defer h.Close()
	return h.ReadAt(p, off)
}

// Close releases the image.
func (im *Image) Close() {
	for _, f := range im.open {
		f.Close()
	}
	_ = os.RemoveAll(im.dir)
}

// ImageWriter assembles an image in an engine directory, file by file,
// before InstallImage puts it in place.
type ImageWriter struct {
	dir string
}

// NewImageWriter starts assembling an image for the engine in dir
// (dropping any earlier unfinished one).
func NewImageWriter(dir string) (*ImageWriter, error) {
	w := &ImageWriter{dir: filepath.Join(dir, imagePending)}
	if err := os.RemoveAll(w.dir); err != nil {
		return nil, err
	}
	return w, os.MkdirAll(w.dir, 0o755)
}

// Write appends p to the image's file path (which must stay inside the
// image).
func (w *ImageWriter) Write(path string, p []byte) error {
	clean := filepath.Clean(filepath.FromSlash(path))
	if !filepath.IsLocal(clean) || clean == imageComplete {
		return fmt.Errorf("%w: image file %q", model.ErrCorruptRecord, path)
	}
	full := filepath.Join(w.dir, clean)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(p)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Skip extends the image's file path by n zero bytes without writing
// them (preallocated index files are mostly zeros).
func (w *ImageWriter) Skip(path string, n int64) error {
	clean := filepath.Clean(filepath.FromSlash(path))
	if !filepath.IsLocal(clean) || clean == imageComplete || n < 0 {
		return fmt.Errorf("%w: image file %q", model.ErrCorruptRecord, path)
	}
	full := filepath.Join(w.dir, clean)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err == nil {
		err = f.Truncate(st.Size() + n)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Complete makes the assembled image durable and marks it whole:
// InstallImage installs it when the engine next opens.
func (w *ImageWriter) Complete() error {
	err := filepath.WalkDir(w.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		return err
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(w.dir, imageComplete), nil, 0o644); err != nil {
		return err
	}
	return syncFS(w.dir)
}

// InstallImage puts a completed image (ImageWriter) in place of the
// engine's files in dir; the engine's identity stays. It reports whether
// there was one. Run it before the engine opens.
func InstallImage(dir string) (bool, error) {
	pending := filepath.Join(dir, imagePending)
	marker := filepath.Join(dir, imageInstalled)
	if _, err := os.Stat(filepath.Join(pending, imageComplete)); err != nil {
		if err := os.Remove(marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		return false, nil
	}
	// The engine's own files go first, then the mark; an install cut
	// short after the mark only moves the rest of the image in (each
	// entry moves whole), as the pending image stays complete until it
	// is all in place.
	if _, err := os.Stat(marker); err != nil {
		for _, name := range []string{checkpointName, inPlaceName, "index", "keys", "log", "local"} {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return false, err
			}
		}
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			return false, err
		}
		if err := syncFS(dir); err != nil {
			return false, err
		}
	}
	entries, err := os.ReadDir(pending)
	if err != nil {
		return false, err
	}
	names := make([]string, 0, len(entries))
	for _, d := range entries {
		if d.Name() != imageComplete {
			names = append(names, d.Name())
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := os.Rename(filepath.Join(pending, name), filepath.Join(dir, name)); err != nil {
			return false, err
		}
	}
	if err := syncFS(dir); err != nil {
		return false, err
	}
	// Done: the image is no longer complete, then gone, then unmarked.
	if err := os.Remove(filepath.Join(pending, imageComplete)); err != nil {
		return false, err
	}
	if err := syncFS(pending); err != nil {
		return false, err
	}
	if err := os.RemoveAll(pending); err != nil {
		return false, err
	}
	if err := os.Remove(marker); err != nil {
		return false, err
	}
	return true, syncFS(dir)
}
