package model

import "testing"

func TestParseTopicName(t *testing.T) {
	good := map[string]TopicName{
		"orders":           {DefaultTenant, DefaultNamespace, "orders"},
		"ns/orders":        {DefaultTenant, "ns", "orders"},
		"t/ns/orders":      {"t", "ns", "orders"},
		"%RETRY%g":         {DefaultTenant, DefaultNamespace, "%RETRY%g"},
		"system/x/a.b_c-d": {"system", "x", "a.b_c-d"},
	}
	for s, want := range good {
		if got, err := ParseTopicName(s); err != nil || got != want {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"", "a/b/c/d", "a//b", "/a", "a/", "a b", "..", "t/./x"} {
		if got, err := ParseTopicName(s); err == nil {
			t.Errorf("%q accepted as %v", s, got)
		}
	}
}
