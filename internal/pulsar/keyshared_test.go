package pulsar

import "testing"

// TestMurmur3: the reference vectors of MurmurHash3 x86_32, seed 0.
func TestMurmur3(t *testing.T) {
	for in, want := range map[string]uint32{"": 0, "hello": 0x248bfa47, "hello, world": 0x149bbb7f,
		"The quick brown fox jumps over the lazy dog": 0x2e4ff723} {
		if got := murmur3([]byte(in)); got != want {
			t.Errorf("murmur3(%q) = %#x, want %#x", in, got, want)
		}
	}
}

// TestAutoSplit: each new consumer takes the lower half of the largest
// range; a leaving one's range goes to the next one up, or down from the
// top.
func TestAutoSplit(t *testing.T) {
	var r keyRouter
	a, b, c := &consumer{name: "a"}, &consumer{name: "b"}, &consumer{name: "c"}
	for _, co := range []*consumer{a, b, c} {
		if !r.add(co) {
			t.Fatal("no range to split")
		}
	}
	// c: [0, 16383]; b: [16384, 32767]; a: [32768, 65535].
	for h, want := range map[int32]*consumer{0: c, 16383: c, 16384: b, 32767: b, 32768: a, 65535: a} {
		if got := r.owner(nil, h); got != want {
			t.Errorf("hash %d: %s, want %s", h, got.name, want.name)
		}
	}
	r.remove(c)
	if got := r.owner(nil, 100); got != b {
		t.Errorf("after c left, 100 went to %s", got.name)
	}
	r.remove(a)
	if got := r.owner(nil, 65535); got != b {
		t.Errorf("after a left, 65535 went to %v", got)
	}
}
