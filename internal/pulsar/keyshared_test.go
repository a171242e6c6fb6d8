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
