package filter

import (
	"strconv"
	"strings"
	"unicode"
)

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tKeyword
	tNum
	tStr
	tOp
	tLParen
	tRParen
	tComma
	tBad
)

type token struct {
	kind tokKind
	text string
	pos  int
}

var keywords = map[string]bool{"AND": true, "OR": true, "NOT": true, "BETWEEN": true, "IN": true, "IS": true,
	"NULL": true, "TRUE": true, "FALSE": true, "CONTAINS": true, "STARTSWITH": true, "ENDSWITH": true}

type lexer struct {
	s   string
	pos int
}

func (l *lexer) next() token {
	for l.pos < len(l.s) && (l.s[l.pos] == ' ' || l.s[l.pos] == '\t' || l.s[l.pos] == '\n' || l.s[l.pos] == '\r') {
		l.pos++
	}
	start := l.pos
	if l.pos >= len(l.s) {
		return token{kind: tEOF, pos: start}
	}
	c := l.s[l.pos]
	switch {
	case c == '(':
		l.pos++
		return token{tLParen, "(", start}
	case c == ')':
		l.pos++
		return token{tRParen, ")", start}
	case c == ',':
		l.pos++
		return token{tComma, ",", start}
	case c == '=':
		l.pos++
		return token{tOp, "=", start}
	case c == '<' || c == '>':
		l.pos++
		if l.pos < len(l.s) && (l.s[l.pos] == '=' || c == '<' && l.s[l.pos] == '>') {
			l.pos++
		}
		return token{tOp, l.s[start:l.pos], start}
	case c == '\'':
		var b strings.Builder
		l.pos++
		for {
			if l.pos >= len(l.s) {
				return token{tBad, "unterminated string", start}
			}
			if l.s[l.pos] == '\'' {
				if l.pos+1 < len(l.s) && l.s[l.pos+1] == '\'' {
					b.WriteByte('\'')
					l.pos += 2
					continue
				}
				l.pos++
				return token{tStr, b.String(), start}
			}
			b.WriteByte(l.s[l.pos])
			l.pos++
		}
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		l.pos++
		for l.pos < len(l.s) && (l.s[l.pos] >= '0' && l.s[l.pos] <= '9' || l.s[l.pos] == '.' ||
			l.s[l.pos] == 'e' || l.s[l.pos] == 'E' || l.s[l.pos] == 'L' || l.s[l.pos] == 'l' ||
			(l.s[l.pos] == '-' || l.s[l.pos] == '+') && (l.s[l.pos-1] == 'e' || l.s[l.pos-1] == 'E')) {
			l.pos++
		}
		return token{tNum, l.s[start:l.pos], start}
	case c == '_' || c == '$' || c < 0x80 && unicode.IsLetter(rune(c)):
		for l.pos < len(l.s) && (l.s[l.pos] == '_' || l.s[l.pos] == '$' || l.s[l.pos] == '.' ||
			l.s[l.pos] < 0x80 && (unicode.IsLetter(rune(l.s[l.pos])) || unicode.IsDigit(rune(l.s[l.pos])))) {
			l.pos++
		}
		w := l.s[start:l.pos]
		if keywords[strings.ToUpper(w)] {
			return token{tKeyword, strings.ToUpper(w), start}
		}
		return token{tIdent, w, start}
	}
	l.pos++
	return token{tBad, string(c), start}
}

type parser struct {
	lex   lexer
	tok   token
	depth int
}

func (p *parser) next() { p.tok = p.lex.next() }

func (p *parser) keyword(k string) bool {
	if p.tok.kind == tKeyword && p.tok.text == k {
		p.next()
		return true
	}
	return false
}

// maxDepth bounds nesting, so a hostile expression cannot exhaust the stack.
const maxDepth = 200

func (p *parser) expr() (node, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxDepth {
		return nil, p.errorf("expression nested too deeply")
	}
	l, err := p.and()
	for err == nil && p.keyword("OR") {
		var r node
		if r, err = p.and(); err == nil {
			l = logic{and: false, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) and() (node, error) {
	l, err := p.not()
	for err == nil && p.keyword("AND") {
		var r node
		if r, err = p.not(); err == nil {
			l = logic{and: true, l: l, r: r}
		}
	}
	return l, err
}

func (p *parser) not() (node, error) {
	if p.keyword("NOT") {
		p.depth++
		defer func() { p.depth-- }()
		if p.depth > maxDepth {
			return nil, p.errorf("expression nested too deeply")
		}
		x, err := p.not()
		return not{x}, err
	}
	return p.comparison()
}

func (p *parser) comparison() (node, error) {
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	if p.tok.kind == tOp {
		op := p.tok.text
		p.next()
		r, err := p.primary()
		return compare{op: op, l: x, r: r}, err
	}
	neg := p.keyword("NOT")
	switch {
	case p.keyword("BETWEEN"):
		lo, err := p.primary()
		if err != nil {
			return nil, err
		}
		if !p.keyword("AND") {
			return nil, p.errorf("BETWEEN needs AND")
		}
		hi, err := p.primary()
		return between{neg: neg, x: x, lo: lo, hi: hi}, err
	case p.keyword("IN"):
		if p.tok.kind != tLParen {
			return nil, p.errorf("IN needs a list")
		}
		p.next()
		var list []value
		for {
			v, err := p.literal()
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			if p.tok.kind == tComma {
				p.next()
				continue
			}
			if p.tok.kind != tRParen {
				return nil, p.errorf("IN list needs )")
			}
			p.next()
			return in{neg: neg, x: x, list: list}, nil
		}
	case p.tok.kind == tKeyword && (p.tok.text == "CONTAINS" || p.tok.text == "STARTSWITH" || p.tok.text == "ENDSWITH"):
		op := p.tok.text
		p.next()
		if p.tok.kind != tStr {
			return nil, p.errorf("%s needs a string", op)
		}
		s := p.tok.text
		p.next()
		return strOp{op: op, neg: neg, x: x, s: s}, nil
	case neg:
		return nil, p.errorf("NOT must precede BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH here")
	case p.keyword("IS"):
		isNeg := p.keyword("NOT")
		if !p.keyword("NULL") {
			return nil, p.errorf("IS needs NULL")
		}
		return isNull{neg: isNeg, x: x}, nil
	}
	return x, nil
}

func (p *parser) primary() (node, error) {
	switch p.tok.kind {
	case tLParen:
		p.next()
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			return nil, p.errorf("missing )")
		}
		p.next()
		return x, nil
	case tIdent:
		name := p.tok.text
		p.next()
		return ident{name}, nil
	}
	v, err := p.literal()
	return literal{v}, err
}

func (p *parser) literal() (value, error) {
	t := p.tok
	switch {
	case t.kind == tStr:
		p.next()
		return value{kind: kStr, str: t.text}, nil
	case t.kind == tNum:
		f, err := strconv.ParseFloat(strings.TrimRight(t.text, "lL"), 64)
		if err != nil {
			return value{}, p.errorf("bad number %q", t.text)
		}
		p.next()
		return value{kind: kNum, num: f}, nil
	case t.kind == tKeyword && (t.text == "TRUE" || t.text == "FALSE"):
		p.next()
		return value{kind: kBool, b: t.text == "TRUE"}, nil
	case t.kind == tKeyword && t.text == "NULL":
		p.next()
		return value{}, nil
	}
	if t.kind == tEOF {
		return value{}, p.errorf("unexpected end")
	}
	return value{}, p.errorf("unexpected %q", t.text)
}
