package commitlog

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		a := make([]byte, rng.IntN(300))
		b := make([]byte, rng.IntN(70000))
		for j := range a {
			a[j] = byte(rng.Uint32())
		}
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		whole := crc32.Checksum(append(append([]byte(nil), a...), b...), castagnoli)
		got := crcCombine(crc32.Checksum(a, castagnoli), crc32.Checksum(b, castagnoli), int64(len(b)))
		if got != whole {
			t.Fatalf("combine(%d, %d bytes) = %08x, want %08x", len(a), len(b), got, whole)
		}
	}
}

func BenchmarkCRCCombine16K(b *testing.B) {
	for i := 0; i < b.N; i++ {
		crcCombine(0x12345678, 0x9abcdef0, 16<<10)
	}
}

func BenchmarkCRC16K(b *testing.B) {
	buf := make([]byte, 16<<10)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		crc32.Checksum(buf, castagnoli)
	}
}
