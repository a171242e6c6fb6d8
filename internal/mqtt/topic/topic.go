// Package topic holds MQTT topic names and filters: their validation,
// shared subscriptions ($share/<group>/<filter>), matching a name against
// a filter, and Tree, the index that finds every subscription a published
// name matches without registering wildcards in advance.
package topic

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is a topic name or filter the specification does not allow.
var ErrInvalid = errors.New("mqtt: invalid topic")

// MaxLength is the longest topic name or filter (a UTF-8 string field).
const MaxLength = 65535

// SharePrefix starts a shared subscription's filter.
const SharePrefix = "$share/"

// ValidName checks a topic name a PUBLISH carries: not empty, no
// wildcard.
func ValidName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: an empty topic name", ErrInvalid)
	case len(name) > MaxLength:
		return fmt.Errorf("%w: a topic name of %d bytes", ErrInvalid, len(name))
	case strings.ContainsAny(name, "+#"):
		return fmt.Errorf("%w: a wildcard in the topic name %q", ErrInvalid, name)
	}
	return nil
}

// ValidFilter checks a topic filter: not empty, '#' only as the whole
// last level, '+' only as a whole level.
func ValidFilter(filter string) error {
	if filter == "" || len(filter) > MaxLength {
		return fmt.Errorf("%w: a filter of %d bytes", ErrInvalid, len(filter))
	}
	levels := strings.Split(filter, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return fmt.Errorf("%w: '#' before the last level of %q", ErrInvalid, filter)
		case l != "#" && l != "+" && strings.ContainsAny(l, "+#"):
			return fmt.Errorf("%w: a wildcard within a level of %q", ErrInvalid, filter)
		}
	}
	return nil
}

// Shared splits a shared subscription's filter ($share/<group>/<filter>)
// into its group and filter; ok is false for an ordinary filter.
func Shared(filter string) (group, f string, ok bool, err error) {
	rest, ok := strings.CutPrefix(filter, SharePrefix)
	if !ok {
		return "", filter, false, nil
	}
	group, f, found := strings.Cut(rest, "/")
	switch {
	case !found || group == "":
		return "", "", true, fmt.Errorf("%w: a shared subscription without a group and a filter: %q", ErrInvalid, filter)
	case strings.ContainsAny(group, "+#"):
		return "", "", true, fmt.Errorf("%w: a wildcard in the share name %q", ErrInvalid, group)
	}
	return group, f, true, ValidFilter(f)
}

// Match reports whether a topic name matches a filter. A name starting
// with '$' matches no filter starting with a wildcard.
func Match(filter, name string) bool {
	if name != "" && name[0] == '$' && filter != "" && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	for {
		fl, frest, fmore := strings.Cut(filter, "/")
		if fl == "#" {
			return true
		}
		nl, nrest, nmore := strings.Cut(name, "/")
		if fl != "+" && fl != nl {
			return false
		}
		switch {
		case !fmore && !nmore:
			return true
		case !nmore:
			// "a/#" matches "a": the parent level.
			return frest == "#"
		case !fmore:
			return false
		}
		filter, name = frest, nrest
	}
}
