package pulsar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/pulsar/pulsarpb"
)

// Key_Shared subscriptions route each message by its key's hash — the
// ordering key, else the partition key (Kafka's record key), else one
// fixed key — as Pulsar does: murmur3 (32-bit, seed 0) of the key, made
// positive, modulo 65536. STICKY consumers declare the hash ranges they
// take; AUTO_SPLIT consumers split the space (keyRouter), so a key stays
// with its consumer while the consumer set does not change. A message
// whose owner has no permits waits for it.

// keyHashRange is the size of Key_Shared's hash space.
const keyHashRange = 65536

// noKey is the key of messages without one.
var noKey = []byte("NONE_KEY")

// stickyKey is the key a message is routed by.
func stickyKey(m *model.Message) []byte {
	if k, ok := m.Header(HeaderOrderingKey); ok && len(k) > 0 {
		return k
	}
	if len(m.Key) > 0 {
		return m.Key
	}
	return noKey
}

// keyHash is a key's place in the hash space.
func keyHash(key []byte) int32 {
	return int32((murmur3(key) & 0x7fffffff) % keyHashRange)
}

// murmur3 is MurmurHash3's x86 32-bit variant with seed 0.
func murmur3(data []byte) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(data)
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
		data = data[4:]
	}
	var k uint32
	switch len(data) {
	case 3:
		k ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// autoRange is an AUTO_SPLIT consumer's share of the hash space: the
// hashes above the previous range's end up to end.
type autoRange struct {
	end int32
	co  *consumer
}

// keyRouter finds the consumer a key hash belongs to. AUTO_SPLIT splits
// the hash space as Pulsar's hash-range auto-split selector does: the
// first consumer takes it all; each next one takes the lower half of the
// largest range; a leaving consumer's range goes to the next one up (the
// one below when it had the top range).
type keyRouter struct {
	ranges []autoRange
}

// add gives an AUTO_SPLIT consumer its range (false: no range is left
// to split).
func (r *keyRouter) add(co *consumer) bool {
	if len(r.ranges) == 0 {
		r.ranges = []autoRange{{end: keyHashRange - 1, co: co}}
		return true
	}
	best, bestSize := -1, int32(0)
	start := int32(0)
	for i, rg := range r.ranges {
		if size := rg.end - start + 1; size > bestSize {
			best, bestSize = i, size
		}
		start = rg.end + 1
	}
	if bestSize < 2 {
		return false
	}
	lo := int32(0)
	if best > 0 {
		lo = r.ranges[best-1].end + 1
	}
	mid := lo + bestSize/2 - 1
	r.ranges = slices.Insert(r.ranges, best, autoRange{end: mid, co: co})
	return true
}

// remove hands a leaving consumer's range on.
func (r *keyRouter) remove(co *consumer) {
	i := slices.IndexFunc(r.ranges, func(rg autoRange) bool { return rg.co == co })
	if i < 0 {
		return
	}
	if i == len(r.ranges)-1 && i > 0 {
		r.ranges[i-1].end = r.ranges[i].end
	}
	r.ranges = slices.Delete(r.ranges, i, i+1)
}

// owner is the consumer of hash h among consumers (nil: none covers it).
func (r *keyRouter) owner(consumers []*consumer, h int32) *consumer {
	for _, co := range consumers {
		for _, rg := range co.sticky {
			if h >= rg[0] && h <= rg[1] {
				return co
			}
		}
	}
	i, _ := slices.BinarySearchFunc(r.ranges, h, func(rg autoRange, h int32) int { return int(rg.end - h) })
	if i == len(r.ranges) {
		return nil
	}
	return r.ranges[i].co
}

// stickyRanges reads a STICKY consumer's declared ranges (nil for
// AUTO_SPLIT), refusing overlaps with the others'.
func stickyRanges(meta *pulsarpb.KeySharedMeta, others []*consumer) ([][2]int32, error) {
	if meta.GetKeySharedMode() != pulsarpb.KeySharedMode_STICKY {
		return nil, nil
	}
	var out [][2]int32
	for _, r := range meta.GetHashRanges() {
		s, e := r.GetStart(), r.GetEnd()
		if s < 0 || e >= keyHashRange || s > e {
			return nil, errBadRange
		}
		for _, co := range others {
			for _, o := range co.sticky {
				if s <= o[1] && o[0] <= e {
					return nil, errRangeTaken
				}
			}
		}
		out = append(out, [2]int32{s, e})
	}
	if len(out) == 0 {
		return nil, errBadRange
	}
	return out, nil
}

var (
	errBadRange   = errors.New("Key_Shared hash ranges must be pairs within [0, 65535]")
	errRangeTaken = fmt.Errorf("%w: a Key_Shared hash range overlaps another consumer's", ErrConsumerBusy)
)
