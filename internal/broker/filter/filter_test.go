package filter

import "testing"

func props(kv ...string) Properties {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestMatch(t *testing.T) {
	msg := props("a", "5", "TAGS", "TagA", "color", "red", "b", "2.5", "flag", "true", "s", "O'Brien")
	cases := map[string]bool{
		"a > 3":                         true,
		"a > 5":                         false,
		"a >= 5 AND b < 3":              true,
		"a = 5":                         true,
		"a <> 5":                        false,
		"b BETWEEN 2 AND 3":             true,
		"b NOT BETWEEN 2 AND 3":         false,
		"TAGS IN ('TagA', 'TagB')":      true,
		"TAGS NOT IN ('TagA')":          false,
		"color = 'red' OR a > 100":      true,
		"NOT (color = 'red')":           false,
		"missing IS NULL":               true,
		"color IS NOT NULL":             true,
		"missing > 1":                   false,
		"NOT (missing > 1)":             false, // unknown stays unknown
		"missing > 1 OR a = 5":          true,
		"color CONTAINS 'e'":            true,
		"color STARTSWITH 'r'":          true,
		"color ENDSWITH 'x'":            false,
		"color NOT CONTAINS 'z'":        true,
		"flag = TRUE":                   true,
		"s = 'O''Brien'":                true,
		"color > 'blue'":                true,
		"color = 5":                     false,
		"(a > 1 AND (b < 1 OR a < 10))": true,
	}
	for expr, want := range cases {
		e, err := Compile(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if got := e.Match(msg); got != want {
			t.Errorf("%s = %v, want %v", expr, got, want)
		}
	}
}

func TestSyntaxErrors(t *testing.T) {
	for _, expr := range []string{"", "a >", "a BETWEEN 1", "a IN 1", "(a = 1", "a = 'x", "a IS 5", "a NOT > 1", "1 2"} {
		if _, err := Compile(expr); err == nil {
			t.Errorf("%q compiled", expr)
		}
	}
}

// FuzzCompile: arbitrary expressions never panic the parser or the
// evaluator, however deeply nested.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{"a > 3 AND (b IN ('x','y') OR NOT c IS NULL)", "a BETWEEN -1.5 AND 2e3", "s CONTAINS 'q'", "((((((a"} {
		f.Add(s)
	}
	p := props("a", "1", "b", "x", "c", "")
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Compile(s)
		if err != nil {
			return
		}
		_ = e.Match(p)
	})
}
