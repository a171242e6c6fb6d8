package queueindex

import (
	"encoding/binary"
	"fmt"

	"github.com/rosettamq/rosetta/internal/model"
)

// EntrySize is the encoded size of an Entry.
const EntrySize = 40

// FileHeaderSize is the size of the header at the start of each index file.
const FileHeaderSize = 16

// FormatVersion is the index file format version.
const FormatVersion = 1

var fileMagic = [4]byte{'R', 'I', 'D', 'X'}

// minRecordSize is the smallest valid commit-log record (its header).
const minRecordSize = 72

// Entry locates one commit-log record of a queue.
type Entry struct {
	Pos        model.LogPos
	BaseOffset model.QueueOffset
	Size       uint32
	Count      uint32
	MaxTime    int64
	TagHash    uint64
	// Segment is the base of the log segment Pos lies in, known for
	// entries still in memory (not encoded: the files derive it).
	Segment model.LogPos
}

// Hole reports an entry whose messages compaction removed entirely: it
// keeps its offsets but points at no record (size 0).
// VisibleAt reports whether the entry's record is readable when the commit
// log is visible up to visible. Local-area copies always are: they are
// made durable before an entry points at them, and only of visible
// records.
func (e Entry) VisibleAt(visible model.LogPos) bool {
	return e.Pos.IsLocal() || e.Pos+model.LogPos(e.Size) <= visible
}

func (e Entry) Hole() bool { return e.Size == 0 }

// End is the offset after the entry's last message.
func (e Entry) End() model.QueueOffset { return e.BaseOffset + model.QueueOffset(e.Count) }

// Encode writes e into b[:EntrySize].
func (e Entry) Encode(b []byte) {
	le := binary.LittleEndian
	_ = b[EntrySize-1]
	le.PutUint64(b[0:], uint64(e.Pos))
	le.PutUint64(b[8:], uint64(e.BaseOffset))
	le.PutUint32(b[16:], e.Size)
	le.PutUint32(b[20:], e.Count)
	le.PutUint64(b[24:], uint64(e.MaxTime))
	le.PutUint64(b[32:], e.TagHash)
}

// DecodeEntry decodes and sanity-checks one entry.
func DecodeEntry(b []byte) (Entry, error) {
	if len(b) < EntrySize {
		return Entry{}, fmt.Errorf("%w: index entry of %d bytes", model.ErrCorruptRecord, len(b))
	}
	le := binary.LittleEndian
	e := Entry{
		Pos:        model.LogPos(le.Uint64(b[0:])),
		BaseOffset: model.QueueOffset(le.Uint64(b[8:])),
		Size:       le.Uint32(b[16:]),
		Count:      le.Uint32(b[20:]),
		MaxTime:    int64(le.Uint64(b[24:])),
		TagHash:    le.Uint64(b[32:]),
	}
	if e.Pos < 0 || e.BaseOffset < 0 || e.Size < minRecordSize && !(e.Size == 0 && e.Pos == 0) || e.Count == 0 {
		return Entry{}, fmt.Errorf("%w: index entry %+v", model.ErrCorruptRecord, e)
	}
	return e, nil
}

func encodeFileHeader(q model.QueueID) []byte {
	b := make([]byte, FileHeaderSize)
	copy(b, fileMagic[:])
	binary.LittleEndian.PutUint32(b[4:], FormatVersion)
	binary.LittleEndian.PutUint32(b[8:], uint32(q))
	return b
}

func checkFileHeader(b []byte, q model.QueueID) error {
	if len(b) < FileHeaderSize || [4]byte(b[:4]) != fileMagic {
		return fmt.Errorf("%w: bad index file magic", model.ErrCorruptRecord)
	}
	if v := binary.LittleEndian.Uint32(b[4:]); v != FormatVersion {
		return fmt.Errorf("%w: index file version %d", model.ErrUnsupportedVersion, v)
	}
	if got := model.QueueID(binary.LittleEndian.Uint32(b[8:])); got != q {
		return fmt.Errorf("%w: index file of queue %d found for queue %d", model.ErrCorruptRecord, got, q)
	}
	return nil
}
