package kbatch

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Filter returns batch with only the records keep accepts, as log
// compaction keeps them: the header (base offset, last offset delta,
// timestamps, producer id, epoch and sequence, attributes) stays, so the
// batch still covers its whole offset range; the kept records are
// re-compressed with the batch's codec; count, length and CRC are
// recomputed. It returns batch itself when every record is kept and nil
// when none is.
func (rd *Reader) Filter(batch []byte, keep func(*Record) bool) ([]byte, int, error) {
	var kept []byte
	n, total := 0, 0
	err := rd.Records(batch, false, func(r *Record) bool {
		total++
		if keep(r) {
			kept = append(kept, r.Raw...)
			n++
		}
		return true
	})
	switch {
	case err != nil:
		return nil, 0, err
	case n == total:
		return batch, n, nil
	case n == 0:
		return nil, 0, nil
	}
	h := ReadHeader(batch)
	body, err := rd.compressRecords(h.Codec(), kept)
	if err != nil {
		return nil, 0, err
	}
	out := make([]byte, HeaderSize, HeaderSize+len(body))
	copy(out, batch[:HeaderSize])
	out = append(out, body...)
	be := binary.BigEndian
	be.PutUint32(out[8:], uint32(len(out)-12))
	be.PutUint32(out[57:], uint32(n))
	be.PutUint32(out[17:], crc32.Checksum(out[CRCFrom:], CRC32C))
	return out, n, nil
}

// compress encodes a records section with a codec: gzip, snappy (a plain
// block, as franz-go and librdkafka write it), LZ4 frames, zstd.
func (rd *Reader) compressRecords(codec int, in []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return in, nil
	case CodecGzip:
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		if _, err := w.Write(in); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	case CodecSnappy:
		return snappy.Encode(nil, in), nil
	case CodecLZ4:
		var b bytes.Buffer
		w := lz4.NewWriter(&b)
		if _, err := w.Write(in); err != nil {
			return nil, err
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	case CodecZstd:
		rd.zstdEncOnce.Do(func() { rd.zstdEnc, rd.zstdEncErr = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)) })
		if rd.zstdEncErr != nil {
			return nil, rd.zstdEncErr
		}
		return rd.zstdEnc.EncodeAll(in, nil), nil
	}
	return nil, fmt.Errorf("%w: codec %d", ErrMalformed, codec)
}
