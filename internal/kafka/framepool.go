package kafka

import (
	"math/bits"
	"sync"
)

// framePool recycles large request frames of produce requests, whose bytes
// are copied into the log before the request finishes and never referenced
// afterwards. Reusing them saves allocating (and zeroing) every produced
// byte. Other requests keep their own frames: their decoded fields may alias
// the frame (group assignments, for example) and outlive the request.
type framePool struct {
	classes [32]sync.Pool
}

const minPooledFrame = 64 << 10

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// get returns a frame of n bytes (contents undefined).
func (p *framePool) get(n int) []byte {
	if n < minPooledFrame {
		return make([]byte, n)
	}
	c := sizeClass(n)
	if c >= len(p.classes) {
		return make([]byte, n)
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

// put returns a frame obtained from get.
func (p *framePool) put(b []byte) {
	if cap(b) < minPooledFrame {
		return
	}
	c := sizeClass(cap(b))
	if c >= len(p.classes) || cap(b) != 1<<c {
		return
	}
	b = b[:cap(b)]
	p.classes[c].Put(&b)
}
