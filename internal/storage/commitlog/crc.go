package commitlog

// CRC-32C combination: crc(A‖B) from crc(A), crc(B) and len(B), without
// reading A or B again. A payload whose tail checksum the caller already
// verified (a Kafka record batch carries CRC-32C of its bytes from offset 21)
// then costs one pass over the bytes instead of two.
//
// Polynomials are in the reflected bit order of hash/crc32: bit 31 is x^0.

const castagnoliReflected = 0x82f63b78

// gfMul multiplies a(x)·b(x) modulo the Castagnoli polynomial.
func gfMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2k[k] is x^(2^k) modulo the polynomial.
var x2k = func() (t [64]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = gfMul(p, p)
	}
	return t
}()

// xPow8n returns x^(8n) modulo the polynomial: the factor that shifts a CRC
// past n bytes.
func xPow8n(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			p = gfMul(x2k[k], p)
		}
	}
	return p
}

// crcCombine returns the CRC-32C of A‖B given crcA, crcB and len(B).
func crcCombine(crcA, crcB uint32, lenB int64) uint32 {
	return gfMul(xPow8n(lenB), crcA) ^ crcB
}
