package filter

import (
	"strings"

	"github.com/rosettamq/rosetta/internal/model"
)

// TagSet parses a tag subscription ("*" or "A || B"); nil matches every
// tag.
func TagSet(expr string) map[string]bool {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == "*" {
		return nil
	}
	set := map[string]bool{}
	for _, t := range strings.Split(expr, "||") {
		if t = strings.TrimSpace(t); t != "" {
			set[t] = true
		}
	}
	return set
}

// MessageProperties are a message's properties as SQL92 filters see them:
// TAGS, KEYS and its headers.
func MessageProperties(m *model.Message) Properties {
	return func(name string) (string, bool) {
		switch name {
		case "TAGS":
			return m.Tags, m.Tags != ""
		case "KEYS":
			return string(m.Key), len(m.Key) > 0
		}
		v, ok := m.Header(name)
		return string(v), ok
	}
}
