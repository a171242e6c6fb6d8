package kbatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// ErrMalformed marks a batch whose records cannot be decoded.
var ErrMalformed = errors.New("malformed record batch")

// RecordHeader is one header of a record.
type RecordHeader struct {
	Key   string
	Value []byte
}

// Record is one record of a batch. Byte fields alias the batch (or its
// decompressed records) and are valid during the callback only.
type Record struct {
	// Raw is the record's whole encoding (length varint included).
	Raw         []byte
	OffsetDelta int32
	Timestamp   int64 // absolute: the batch's max timestamp for LogAppendTime batches
	Key         []byte
	KeyNull     bool
	Value       []byte
	ValueNull   bool // a tombstone
	Headers     []RecordHeader
}

// Reader decodes the records of batches, decompressing as needed. It is
// safe for concurrent use; the broker keeps one.
type Reader struct {
	// MaxDecompressed bounds a batch's decompressed size (a guard against
	// compression bombs).
	MaxDecompressed int

	zstdOnce sync.Once
	zstd     *zstd.Decoder
	zstdErr  error

	zstdEncOnce sync.Once // compaction re-compresses
	zstdEnc     *zstd.Encoder
	zstdEncErr  error

	bufs sync.Pool // *[]byte: decompressed records sections
	lz4s sync.Pool // *lz4.Reader
	gzs  sync.Pool // *gzip.Reader
}

// NewReader returns a reader that refuses batches decompressing to more
// than maxDecompressed bytes.
func NewReader(maxDecompressed int) *Reader {
	return &Reader{MaxDecompressed: maxDecompressed}
}

// Records calls fn for each record of batch, in order, until fn returns
// false. withHeaders decodes record headers too (skipped otherwise). The
// record's byte slices are valid only during fn: a compressed batch is
// decompressed into a buffer reused once Records returns.
func (rd *Reader) Records(batch []byte, withHeaders bool, fn func(*Record) bool) error {
	_, err := rd.RecordsFind(batch, withHeaders, nil, fn)
	return err
}

// RecordsFind is Records that also reports whether the batch's records
// section (decompressed) contains marker anywhere — a cheap test for a
// header key without decoding the headers.
func (rd *Reader) RecordsFind(batch []byte, withHeaders bool, marker []byte, fn func(*Record) bool) (bool, error) {
	found, err := rd.records(batch, withHeaders, marker, fn)
	return found, err
}

func (rd *Reader) records(batch []byte, withHeaders bool, marker []byte, fn func(*Record) bool) (found bool, err error) {
	if len(batch) < HeaderSize {
		return false, fmt.Errorf("%w: %d bytes", ErrMalformed, len(batch))
	}
	h := ReadHeader(batch)
	body := batch[HeaderSize:]
	if h.Codec() != CodecNone {
		bp, _ := rd.bufs.Get().(*[]byte)
		if bp == nil {
			bp = new([]byte)
		}
		out, err := rd.decompress(h.Codec(), body, (*bp)[:0])
		if err != nil {
			rd.bufs.Put(bp)
			return false, err
		}
		defer func() {
			if cap(out) <= maxPooledBuffer {
				*bp = out
				rd.bufs.Put(bp)
			}
		}()
		body = out
	}
	if marker != nil {
		found = bytes.Contains(body, marker)
	}
	logAppend := h.Attributes&AttrLogAppendTime != 0
	d := decoder{b: body}
	var r Record
	for i := int32(0); i < h.NumRecords; i++ {
		start := d.b
		n := d.varint()
		if d.err != nil || n < 0 || n > int64(len(d.b)) {
			return false, fmt.Errorf("%w: record %d length %d", ErrMalformed, i, n)
		}
		rec := decoder{b: d.b[:n]}
		d.b = d.b[n:]
		r.Raw = start[:len(start)-len(d.b)]
		rec.byte() // attributes
		tsDelta := rec.varint()
		r.OffsetDelta = int32(rec.varint())
		r.Timestamp = h.FirstTimestamp + tsDelta
		if logAppend {
			r.Timestamp = h.MaxTimestamp
		}
		r.Key, r.KeyNull = rec.bytes()
		r.Value, r.ValueNull = rec.bytes()
		r.Headers = r.Headers[:0]
		if withHeaders {
			nh := rec.varint()
			if nh < 0 || nh > int64(len(rec.b)) {
				return false, fmt.Errorf("%w: record %d has %d headers", ErrMalformed, i, nh)
			}
			for j := int64(0); j < nh && rec.err == nil; j++ {
				k, _ := rec.bytes()
				v, _ := rec.bytes()
				r.Headers = append(r.Headers, RecordHeader{Key: string(k), Value: v})
			}
		}
		if rec.err != nil {
			return false, fmt.Errorf("%w: record %d: %v", ErrMalformed, i, rec.err)
		}
		if !fn(&r) {
			return found, nil
		}
	}
	return found, nil
}

// maxPooledBuffer is the largest decompression buffer kept for reuse.
const maxPooledBuffer = 4 << 20

// decompress inflates a batch's records section, appending to dst.
func (rd *Reader) decompress(codec int, in, dst []byte) ([]byte, error) {
	limit := rd.MaxDecompressed
	if limit <= 0 {
		limit = 64 << 20
	}
	switch codec {
	case CodecGzip:
		zr, _ := rd.gzs.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(bytes.NewReader(in))
		} else {
			err = zr.Reset(bytes.NewReader(in))
		}
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrMalformed, err)
		}
		defer rd.gzs.Put(zr)
		return readAll(dst, zr, limit, codec)
	case CodecSnappy:
		return decodeSnappy(dst, in, limit)
	case CodecLZ4:
		zr, _ := rd.lz4s.Get().(*lz4.Reader)
		if zr == nil {
			zr = lz4.NewReader(nil)
		}
		zr.Reset(bytes.NewReader(in))
		defer rd.lz4s.Put(zr)
		return readAll(dst, zr, limit, codec)
	case CodecZstd:
		rd.zstdOnce.Do(func() {
			rd.zstd, rd.zstdErr = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(uint64(limit)))
		})
		if rd.zstdErr != nil {
			return nil, rd.zstdErr
		}
		out, err := rd.zstd.DecodeAll(in, dst)
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrMalformed, err)
		}
		if len(out) > limit {
			return nil, fmt.Errorf("%w: decompresses past %d bytes", ErrMalformed, limit)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("%w: codec %d", ErrMalformed, codec)
	}
}

// readAll appends what r yields to dst, refusing more than limit bytes.
func readAll(dst []byte, r io.Reader, limit, codec int) ([]byte, error) {
	if cap(dst) == 0 {
		dst = make([]byte, 0, 64<<10)
	}
	for {
		if len(dst) == cap(dst) {
			if len(dst) > limit {
				return nil, fmt.Errorf("%w: decompresses past %d bytes", ErrMalformed, limit)
			}
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			if len(dst) > limit {
				return nil, fmt.Errorf("%w: decompresses past %d bytes", ErrMalformed, limit)
			}
			return dst, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: codec %d: %v", ErrMalformed, codec, err)
		}
	}
}

// xerialMagic starts snappy data in the framing Java producers use.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

// decodeSnappy decodes a raw snappy block or xerial-framed chunks.
func decodeSnappy(out, in []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(in, xerialMagic) {
		return snappyBlock(out, in, limit)
	}
	if len(in) < 16 {
		return nil, fmt.Errorf("%w: xerial snappy header", ErrMalformed)
	}
	in = in[16:] // magic, version, compatible version
	for len(in) > 0 {
		if len(in) < 4 {
			return nil, fmt.Errorf("%w: xerial snappy chunk length", ErrMalformed)
		}
		n := int(binary.BigEndian.Uint32(in))
		if n < 0 || n > len(in)-4 {
			return nil, fmt.Errorf("%w: xerial snappy chunk of %d bytes", ErrMalformed, n)
		}
		var err error
		if out, err = snappyBlock(out, in[4:4+n], limit); err != nil {
			return nil, err
		}
		in = in[4+n:]
	}
	return out, nil
}

// snappyBlock appends one decoded snappy block to dst.
func snappyBlock(dst, block []byte, limit int) ([]byte, error) {
	n, err := snappy.DecodedLen(block)
	if err != nil || n < 0 || len(dst)+n > limit {
		return nil, fmt.Errorf("%w: snappy block", ErrMalformed)
	}
	dst = slices.Grow(dst, n)
	if _, err := snappy.Decode(dst[len(dst):len(dst)+n], block); err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
	}
	return dst[:len(dst)+n], nil
}

// decoder reads varints and length-prefixed bytes with a sticky error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// bytes reads a varint length and that many bytes; length -1 is null.
func (d *decoder) bytes() ([]byte, bool) {
	n := d.varint()
	if d.err != nil {
		return nil, false
	}
	if n < 0 {
		return nil, true
	}
	if n > int64(len(d.b)) {
		d.fail()
		return nil, false
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v, false
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = io.ErrUnexpectedEOF
	}
}
