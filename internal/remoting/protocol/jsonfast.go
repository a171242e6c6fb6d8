package protocol

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// headerKeys are the JSON header's fields.
var headerKeys = []string{"code", "version", "opaque", "flag", "language", "remark", "extFields"}

// decodeJSONHeaderFast parses the JSON header clients send (flat fields,
// an extFields object of strings, no escapes) without reflection. It
// reports false on anything else, and the caller falls back to the general
// decoder, so it never decides what a valid header means.
func decodeJSONHeaderFast(b []byte) (*Command, bool) {
	p := jsonScan{b: b}
	if !p.byte('{') {
		return nil, false
	}
	c := &Command{ExtFields: make(map[string]string, 16)}
	if p.peek('}') {
		p.i++
		return c, p.end()
	}
	for {
		key, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, false
		}
		// Field names match case-insensitively, as the general decoder's do.
		for _, known := range headerKeys {
			if strings.EqualFold(key, known) {
				key = known
				break
			}
		}
		switch key {
		case "code", "version", "opaque", "flag":
			n, ok := p.int32()
			if !ok {
				return nil, false
			}
			switch key {
			case "code":
				c.Code = n
			case "version":
				c.Version = n
			case "opaque":
				c.Opaque = n
			default:
				c.Flag = n
			}
		case "language":
			s, ok := p.str()
			if !ok {
				return nil, false
			}
			c.Language = s
		case "remark":
			if p.null() {
				break
			}
			s, ok := p.str()
			if !ok {
				return nil, false
			}
			c.Remark = s
		case "extFields":
			if p.null() {
				break
			}
			if !p.ext(c.ExtFields) {
				return nil, false
			}
		default:
			if !p.scalar() {
				return nil, false
			}
		}
		if p.peek(',') {
			p.i++
			continue
		}
		if !p.byte('}') {
			return nil, false
		}
		return c, p.end()
	}
}

// jsonScan is a cursor over a JSON text.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) ws() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

func (p *jsonScan) peek(c byte) bool {
	p.ws()
	return p.i < len(p.b) && p.b[p.i] == c
}

func (p *jsonScan) byte(c byte) bool {
	if !p.peek(c) {
		return false
	}
	p.i++
	return true
}

func (p *jsonScan) end() bool {
	p.ws()
	return p.i == len(p.b)
}

// str reads a string. Escapes are decoded (RocketMQ properties carry
// \u0001 and \u0002 separators); surrogate escapes and invalid UTF-8 are
// left to the general decoder.
// extKeys are the ext field names clients send most; key returns these
// shared strings instead of allocating new ones.
var extKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
		"bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname",
		"brokerName", "consumerGroup", "queueOffset", "maxMsgNums", "commitOffset", "suspendTimeoutMillis",
		"subscription", "subVersion", "expressionType", "timestamp", "offset", "group", "delayLevel", "originMsgId",
		"originTopic", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"} {
		m[k] = k
	}
	return m
}()

// key reads a JSON string, sharing the common ext field names.
func (p *jsonScan) key() (string, bool) {
	p.ws()
	if i := p.i; i < len(p.b) && p.b[i] == '"' {
		for j := i + 1; j < len(p.b) && j-i <= 32; j++ {
			if c := p.b[j]; c == '"' {
				if k, ok := extKeys[string(p.b[i+1:j])]; ok {
					p.i = j + 1
					return k, true
				}
				break
			} else if c == '\\' || c < 0x20 || c >= 0x80 {
				break
			}
		}
	}
	return p.str()
}

func (p *jsonScan) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	var buf []byte // set once an escape is seen
	ascii := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			raw := p.b[start:p.i]
			p.i++
			if buf != nil {
				raw = buf
			}
			if !ascii && !utf8.Valid(raw) {
				return "", false
			}
			return string(raw), true
		case c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		case c == '\\':
			if buf == nil {
				buf = append([]byte(nil), p.b[start:p.i]...)
			}
			if p.i+1 >= len(p.b) {
				return "", false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				if p.i+4 > len(p.b) {
					return "", false
				}
				r, err := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 32)
				if err != nil || r >= 0xD800 && r <= 0xDFFF {
					return "", false
				}
				buf = utf8.AppendRune(buf, rune(r))
				p.i += 4
			default:
				return "", false
			}
			continue
		}
		if buf != nil {
			buf = append(buf, c)
		}
		p.i++
	}
	return "", false
}

// number reads a JSON number (strict grammar) and reports whether it is an
// integer.
func (p *jsonScan) number() (text string, integer, ok bool) {
	p.ws()
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case digits() == 0:
		return "", false, false
	}
	integer = true
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		integer = false
		if digits() == 0 {
			return "", false, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		integer = false
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return "", false, false
		}
	}
	return string(p.b[start:p.i]), integer, true
}

func (p *jsonScan) int32() (int32, bool) {
	text, integer, ok := p.number()
	if !ok || !integer {
		return 0, false
	}
	n, err := strconv.ParseInt(text, 10, 32)
	return int32(n), err == nil
}

func (p *jsonScan) null() bool {
	p.ws()
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// scalar skips a string, number, true, false or null.
func (p *jsonScan) scalar() bool {
	p.ws()
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		_, _, ok := p.number()
		return ok
	}
	for _, w := range []string{"true", "false", "null"} {
		if len(p.b)-p.i >= len(w) && string(p.b[p.i:p.i+len(w)]) == w {
			p.i += len(w)
			return true
		}
	}
	return false
}

// ext reads an object of string values into m.
func (p *jsonScan) ext(m map[string]string) bool {
	if !p.byte('{') {
		return false
	}
	if p.peek('}') {
		p.i++
		return true
	}
	for {
		k, ok := p.key()
		if !ok || !p.byte(':') {
			return false
		}
		v, ok := p.str()
		if !ok {
			return false
		}
		m[k] = v
		if p.peek(',') {
			p.i++
			continue
		}
		return p.byte('}')
	}
}
