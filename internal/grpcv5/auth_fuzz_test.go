package grpcv5

import (
	"strings"
	"testing"
)

// FuzzParseAuthorization: the MQv2-HMAC-SHA1 header parser never panics
// and only yields an access key and signature it actually found.
func FuzzParseAuthorization(f *testing.F) {
	f.Add("MQv2-HMAC-SHA1 Credential=alice//Rocketmq, SignedHeaders=x-mq-date-time, Signature=0a1b")
	f.Add("MQv2-HMAC-SHA1 Credential=, Signature=")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, h string) {
		ak, sig, ok := parseAuthorization(h)
		if ok && (ak == "" || sig == "" || !strings.Contains(h, ak) || !strings.Contains(h, sig)) {
			t.Fatalf("%q parsed to %q %q", h, ak, sig)
		}
	})
}
