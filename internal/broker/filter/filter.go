// Package filter evaluates RocketMQ SQL92 message filters on the broker:
// AND, OR, NOT; = <> < <= > >=; [NOT] BETWEEN … AND …; [NOT] IN (…);
// IS [NOT] NULL; [NOT] CONTAINS / STARTSWITH / ENDSWITH; numeric (long or
// decimal), 'string' (” escapes a quote), TRUE, FALSE and NULL literals.
// Identifiers are message properties (TAGS and KEYS among them). As in
// RocketMQ, a comparison with a missing property or of mismatched types is
// unknown, and a message matches only when the whole expression is true.
package filter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSyntax marks an expression that does not parse.
var ErrSyntax = errors.New("filter syntax error")

// Properties looks up a message property.
type Properties func(name string) (string, bool)

// Expr is a compiled filter.
type Expr struct {
	root node
	text string
}

// String returns the source text.
func (e *Expr) String() string { return e.text }

// Match reports whether a message with these properties passes.
func (e *Expr) Match(props Properties) bool { return e.root.eval(props).truth() == yes }

// tri is three-valued logic.
type tri int

const (
	unknown tri = iota
	no
	yes
)

func triOf(b bool) tri {
	if b {
		return yes
	}
	return no
}

// value is an evaluated operand.
type value struct {
	kind kind
	num  float64
	str  string
	b    bool
}

type kind int

const (
	kNull kind = iota
	kNum
	kStr
	kBool
)

func (v value) truth() tri {
	if v.kind != kBool {
		return unknown
	}
	return triOf(v.b)
}

func boolValue(t tri) value {
	if t == unknown {
		return value{}
	}
	return value{kind: kBool, b: t == yes}
}

type node interface{ eval(Properties) value }

type literal struct{ v value }

func (l literal) eval(Properties) value { return l.v }

type ident struct{ name string }

// eval reads a property: numeric text is a number, "true"/"false" a
// boolean, anything else a string; missing is NULL.
func (i ident) eval(p Properties) value {
	s, ok := p(i.name)
	if !ok {
		return value{}
	}
	return value{kind: kStr, str: s}
}

type logic struct {
	and  bool
	l, r node
}

func (n logic) eval(p Properties) value {
	a := n.l.eval(p).truth()
	if n.and && a == no || !n.and && a == yes {
		return boolValue(a)
	}
	b := n.r.eval(p).truth()
	if n.and {
		switch {
		case a == yes && b == yes:
			return boolValue(yes)
		case b == no:
			return boolValue(no)
		}
		return value{}
	}
	switch {
	case b == yes:
		return boolValue(yes)
	case a == no && b == no:
		return boolValue(no)
	}
	return value{}
}

type not struct{ x node }

func (n not) eval(p Properties) value {
	switch n.x.eval(p).truth() {
	case yes:
		return boolValue(no)
	case no:
		return boolValue(yes)
	}
	return value{}
}

// numeric converts an operand to a number, if it is or holds one.
func numeric(v value) (float64, bool) {
	switch v.kind {
	case kNum:
		return v.num, true
	case kStr:
		f, err := strconv.ParseFloat(strings.TrimSpace(v.str), 64)
		return f, err == nil
	}
	return 0, false
}

type compare struct {
	op   string
	l, r node
}

func (c compare) eval(p Properties) value {
	return boolValue(cmpValues(c.op, c.l.eval(p), c.r.eval(p)))
}

// cmpValues compares numerically when either side is a numeric literal (or
// both hold numbers), as strings otherwise; booleans only with = and <>.
func cmpValues(op string, a, b value) tri {
	if a.kind == kNull || b.kind == kNull {
		return unknown
	}
	if a.kind == kBool || b.kind == kBool {
		ab, aok := asBool(a)
		bb, bok := asBool(b)
		if !aok || !bok {
			return unknown
		}
		switch op {
		case "=":
			return triOf(ab == bb)
		case "<>":
			return triOf(ab != bb)
		}
		return unknown
	}
	if a.kind == kNum || b.kind == kNum {
		x, xok := numeric(a)
		y, yok := numeric(b)
		if !xok || !yok {
			return unknown
		}
		return triOf(order(op, cmpFloat(x, y)))
	}
	return triOf(order(op, strings.Compare(a.str, b.str)))
}

func asBool(v value) (bool, bool) {
	switch v.kind {
	case kBool:
		return v.b, true
	case kStr:
		switch strings.ToLower(v.str) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	return false, false
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func order(op string, c int) bool {
	switch op {
	case "=":
		return c == 0
	case "<>":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	}
	return c >= 0
}

type between struct {
	neg       bool
	x, lo, hi node
}

func (n between) eval(p Properties) value {
	x := n.x.eval(p)
	a, b := cmpValues(">=", x, n.lo.eval(p)), cmpValues("<=", x, n.hi.eval(p))
	r := logic{and: true, l: literal{boolValue(a)}, r: literal{boolValue(b)}}.eval(p).truth()
	if n.neg && r != unknown {
		r = triOf(r == no)
	}
	return boolValue(r)
}

type in struct {
	neg  bool
	x    node
	list []value
}

func (n in) eval(p Properties) value {
	x := n.x.eval(p)
	if x.kind == kNull {
		return value{}
	}
	found := false
	for _, v := range n.list {
		if cmpValues("=", x, v) == yes {
			found = true
			break
		}
	}
	return boolValue(triOf(found != n.neg))
}

type isNull struct {
	neg bool
	x   node
}

func (n isNull) eval(p Properties) value {
	return boolValue(triOf((n.x.eval(p).kind == kNull) != n.neg))
}

type strOp struct {
	op  string // CONTAINS, STARTSWITH, ENDSWITH
	neg bool
	x   node
	s   string
}

func (n strOp) eval(p Properties) value {
	x := n.x.eval(p)
	if x.kind != kStr {
		return value{}
	}
	var r bool
	switch n.op {
	case "CONTAINS":
		r = strings.Contains(x.str, n.s)
	case "STARTSWITH":
		r = strings.HasPrefix(x.str, n.s)
	default:
		r = strings.HasSuffix(x.str, n.s)
	}
	return boolValue(triOf(r != n.neg))
}

// Compile parses a SQL92 filter expression.
func Compile(text string) (*Expr, error) {
	p := &parser{lex: lexer{s: text}}
	p.next()
	root, err := p.expr()
	if err == nil && p.tok.kind != tEOF {
		err = p.errorf("unexpected %q", p.tok.text)
	}
	if err != nil {
		return nil, err
	}
	return &Expr{root: root, text: text}, nil
}

func (p *parser) errorf(f string, a ...any) error {
	return fmt.Errorf("%w at %d: %s", ErrSyntax, p.tok.pos, fmt.Sprintf(f, a...))
}
