package app

import "testing"

func TestHostOrdinal(t *testing.T) {
	for host, want := range map[string]int{"rel-rosetta-0": 0, "rel-rosetta-12.rel-rosetta-headless.msg.svc": 12, "nohyphen": -1, "a-b": -1} {
		n, ok := hostOrdinal(host)
		if !ok {
			n = -1
		}
		if n != want {
			t.Errorf("%s: %d, want %d", host, n, want)
		}
	}
}
