package topic

import "strings"

// Tree indexes values (subscriptions) by topic filter, level by level, so
// the values whose filters match a name are found in time proportional to
// the name's levels, whatever the number of filters. It is not safe for
// concurrent use.
type Tree[V comparable] struct {
	root node[V]
	size int
}

type node[V comparable] struct {
	children map[string]*node[V]
	values   []V // of filters ending here
	hashes   []V // of filters ending here with "/#": they match this level too
}

// Len is how many (filter, value) pairs the tree holds.
func (t *Tree[V]) Len() int { return t.size }

// Add indexes v under filter (once: adding it again does nothing).
func (t *Tree[V]) Add(filter string, v V) {
	n := &t.root
	for l := range strings.SplitSeq(filter, "/") {
		if l == "#" {
			if !contains(n.hashes, v) {
				n.hashes = append(n.hashes, v)
				t.size++
			}
			return
		}
		if n.children == nil {
			n.children = map[string]*node[V]{}
		}
		c := n.children[l]
		if c == nil {
			c = &node[V]{}
			n.children[l] = c
		}
		n = c
	}
	if !contains(n.values, v) {
		n.values = append(n.values, v)
		t.size++
	}
}

// Remove drops v from filter; empty branches go.
func (t *Tree[V]) Remove(filter string, v V) {
	levels := strings.Split(filter, "/")
	if t.remove(&t.root, levels, v) {
		t.size--
	}
}

func (t *Tree[V]) remove(n *node[V], levels []string, v V) bool {
	if len(levels) == 0 {
		return drop(&n.values, v)
	}
	if levels[0] == "#" {
		return drop(&n.hashes, v)
	}
	c := n.children[levels[0]]
	if c == nil {
		return false
	}
	removed := t.remove(c, levels[1:], v)
	if len(c.children) == 0 && len(c.values) == 0 && len(c.hashes) == 0 {
		delete(n.children, levels[0])
	}
	return removed
}

// Match calls fn with the value of every filter matching name (a value
// under several matching filters, once per filter).
func (t *Tree[V]) Match(name string, fn func(V)) {
	dollar := name != "" && name[0] == '$'
	t.match(&t.root, name, true, dollar, fn)
}

func (t *Tree[V]) match(n *node[V], name string, first, dollar bool, fn func(V)) {
	wild := !(first && dollar) // wildcards at the first level skip $ names
	if wild {
		for _, v := range n.hashes {
			fn(v)
		}
	}
	level, rest, more := strings.Cut(name, "/")
	visit := func(c *node[V]) {
		if c == nil {
			return
		}
		if !more {
			for _, v := range c.values {
				fn(v)
			}
			for _, v := range c.hashes { // "a/#" matches "a"
				fn(v)
			}
			return
		}
		t.match(c, rest, false, dollar, fn)
	}
	visit(n.children[level])
	if wild && level != "+" {
		visit(n.children["+"])
	}
}

func contains[V comparable](s []V, v V) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func drop[V comparable](s *[]V, v V) bool {
	for i, x := range *s {
		if x == v {
			(*s)[i] = (*s)[len(*s)-1]
			*s = (*s)[:len(*s)-1]
			return true
		}
	}
	return false
}
