package storage

import (
	"container/list"
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage/commitlog"
	"github.com/rosettamq/rosetta/internal/storage/tier"
)

// tierCache holds what cold reads fetched from the bucket: each object's
// index (checked against its commit record) and chunks of queue data, the
// least recently used chunk evicted first once CacheBytes is exceeded. One
// fetch of a given index or chunk is in flight at a time; readers of the
// same bytes wait for it.
type tierCache struct {
	bucket tier.Bucket
	chunk  int64
	limit  int64
	stats  *TierStats
	// background runs a read-ahead (nil: none); it may drop it.
	background func(func(context.Context))
	onRead     func(time.Duration) // nil: not measured

	mu      sync.Mutex
	objects map[string]*cachedObject
	lru     *list.List // of *cachedChunk, most recent at the front
	size    int64
	flights map[flightKey]*flight
}

type cachedObject struct {
	index  *tier.Index
	chunks []*cachedChunk // sorted by start, not overlapping
}

type cachedChunk struct {
	obj   *cachedObject
	start int64
	data  []byte
	elem  *list.Element
	ahead bool // the read-ahead of the next chunk was started
}

type flightKey struct {
	key string
	at  int64 // -1: the index
}

type flight struct {
	done chan struct{}
	err  error
}

func newTierCache(b tier.Bucket, chunk, limit int64, stats *TierStats) *tierCache {
	return &tierCache{bucket: b, chunk: chunk, limit: limit, stats: stats, objects: map[string]*cachedObject{},
		lru: list.New(), flights: map[flightKey]*flight{}}
}

// once runs fetch unless a fetch under k is in flight, in which case it
// waits for that one; either way the caller looks in the cache again.
func (c *tierCache) once(ctx context.Context, k flightKey, fetch func() error) error {
	c.mu.Lock()
	f, ok := c.flights[k]
	if !ok {
		f = &flight{done: make(chan struct{})}
		c.flights[k] = f
		c.mu.Unlock()
		f.err = fetch()
		c.mu.Lock()
		delete(c.flights, k)
		close(f.done)
		c.mu.Unlock()
		return f.err
	}
	c.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", model.ErrTierUnavailable, ctx.Err())
	}
}

// object returns the object of a tiered segment with its index.
func (c *tierCache) object(ctx context.Context, s *TieredSegment) (*cachedObject, error) {
	for {
		c.mu.Lock()
		o := c.objects[s.Key]
		c.mu.Unlock()
		if o != nil {
			return o, nil
		}
		if err := c.once(ctx, flightKey{s.Key, -1}, func() error { return c.loadIndex(ctx, s) }); err != nil {
			return nil, err
		}
	}
}

// loadIndex fetches an object's index and trailer in one ranged GET and
// checks them against the commit record: an object that disagrees is
// never served.
func (c *tierCache) loadIndex(ctx context.Context, s *TieredSegment) error {
	n := int64(s.IndexLen) + tier.TrailerSize
	b, err := c.bucket.ReadRange(ctx, s.Key, s.Size-n, n)
	if err != nil {
		return fmt.Errorf("%w: index of %s: %w", model.ErrTierUnavailable, s.Key, err)
	}
	tr, err := tier.DecodeTrailer(b[len(b)-tier.TrailerSize:])
	if err == nil && (tr.Size() != s.Size || tr.IndexLen != s.IndexLen || tr.IndexCRC != s.IndexCRC ||
		tr.DataCRC != s.DataCRC || tr.SegmentBase != s.Base) {
		err = fmt.Errorf("%w: trailer disagrees with the commit record", tier.ErrBadObject)
	}
	var x *tier.Index
	if err == nil {
		x, err = tier.DecodeIndex(b[:s.IndexLen], tr)
	}
	if err == nil && (x.SegmentBase != s.Base || x.SegmentEnd() != s.End) {
		err = fmt.Errorf("%w: index covers %d..%d, committed %d..%d", tier.ErrBadObject, x.SegmentBase, x.SegmentEnd(), s.Base, s.End)
	}
	if err != nil {
		return fmt.Errorf("%w: object %s: %w", model.ErrTierUnavailable, s.Key, err)
	}
	c.mu.Lock()
	c.objects[s.Key] = &cachedObject{index: x}
	c.size += int64(s.IndexLen)
	c.mu.Unlock()
	return nil
}

// record returns the size bytes of the record at log position pos of a
// tiered segment, fetching the chunk of its queue's data that begins with
// it when no cached chunk holds it.
func (c *tierCache) record(ctx context.Context, s *TieredSegment, pos model.LogPos, size int64) ([]byte, error) {
	o, err := c.object(ctx, s)
	if err != nil {
		return nil, err
	}
	at, queueEnd, ok := o.index.Locate(pos)
	if !ok || at+size > queueEnd {
		return nil, fmt.Errorf("%w: object %s holds no record of %d bytes at %d", model.ErrCorruptRecord, s.Key, size, pos)
	}
	for miss := false; ; miss = true {
		if b, next := c.cached(o, at, size); b != nil {
			if !miss {
				c.stats.CacheHits.Add(1)
			}
			if next > 0 && next < queueEnd && c.background != nil {
				c.background(func(ctx context.Context) {
					end := c.chunkEnd(next, 1, queueEnd)
					if b, _ := c.cached(o, next, 1); b == nil {
						_ = c.once(ctx, flightKey{s.Key, next}, func() error { return c.fetch(ctx, s, o, next, end) })
					}
				})
			}
			return b, nil
		}
		if miss {
			// Fetched, then evicted before this reader looked: fetch
			// again (a cache far too small for its readers).
			c.stats.CacheMisses.Add(1)
		}
		end := c.chunkEnd(at, size, queueEnd)
		if err := c.once(ctx, flightKey{s.Key, at}, func() error { return c.fetch(ctx, s, o, at, end) }); err != nil {
			return nil, err
		}
		if !miss {
			c.stats.CacheMisses.Add(1)
		}
	}
}

// chunkEnd is where a fetch of a queue's data from at ends: a chunk on (at
// least the record of size bytes), or the queue's end in the object when
// less than half a chunk would be left after it (one GET rather than a
// second small one).
func (c *tierCache) chunkEnd(at, size, queueEnd int64) int64 {
	end := min(max(at+c.chunk, at+size), queueEnd)
	if queueEnd-end < c.chunk/2 {
		end = queueEnd
	}
	return end
}

// cached returns [at, at+size) of the object from a cached chunk. Once a
// reader is past the middle of a chunk, next is where the following chunk
// of the queue begins (the first record the chunk does not hold whole), for
// a read-ahead; it is 0 otherwise and for every later reader.
func (c *tierCache) cached(o *cachedObject, at, size int64) (b []byte, next int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(o.chunks), func(i int) bool { return o.chunks[i].start > at }) - 1
	if i < 0 {
		return nil, 0
	}
	ch := o.chunks[i]
	if at+size > ch.start+int64(len(ch.data)) {
		return nil, 0
	}
	c.lru.MoveToFront(ch.elem)
	rel := at - ch.start
	if !ch.ahead && 2*(rel+size) >= int64(len(ch.data)) {
		ch.ahead = true
		p := rel
		for p+commitlog.HeaderSize <= int64(len(ch.data)) {
			n := int64(binary.LittleEndian.Uint32(ch.data[p:]))
			if n == 0 || p+n > int64(len(ch.data)) {
				break
			}
			p += n
		}
		next = ch.start + p
	}
	return ch.data[rel : rel+size : rel+size], next
}

// fetch reads [at, end) of an object into the cache.
func (c *tierCache) fetch(ctx context.Context, s *TieredSegment, o *cachedObject, at, end int64) error {
	start := time.Now()
	b, err := c.bucket.ReadRange(ctx, s.Key, at, end-at)
	if c.onRead != nil {
		c.onRead(time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("%w: %s at %d: %w", model.ErrTierUnavailable, s.Key, at, err)
	}
	c.stats.ColdReads.Add(1)
	c.stats.ColdReadBytes.Add(int64(len(b)))
	c.mu.Lock()
	defer c.mu.Unlock()
	// Chunks do not overlap: trim the new one to the gap it fills.
	i := sort.Search(len(o.chunks), func(i int) bool { return o.chunks[i].start > at })
	if i < len(o.chunks) && o.chunks[i].start < end {
		b = b[:o.chunks[i].start-at]
	}
	ch := &cachedChunk{obj: o, start: at, data: b}
	ch.elem = c.lru.PushFront(ch)
	o.chunks = append(o.chunks, nil)
	copy(o.chunks[i+1:], o.chunks[i:])
	o.chunks[i] = ch
	c.size += int64(len(b))
	for c.size > c.limit && c.lru.Len() > 1 {
		c.evict(c.lru.Back().Value.(*cachedChunk))
	}
	return nil
}

// evict drops a chunk (readers holding its bytes keep them).
func (c *tierCache) evict(ch *cachedChunk) {
	c.lru.Remove(ch.elem)
	o := ch.obj
	i := sort.Search(len(o.chunks), func(i int) bool { return o.chunks[i].start >= ch.start })
	if i < len(o.chunks) && o.chunks[i] == ch {
		o.chunks = append(o.chunks[:i], o.chunks[i+1:]...)
	}
	c.size -= int64(len(ch.data))
}
