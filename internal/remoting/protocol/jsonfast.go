package protocol

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// headerKeys are the JSON header's fields.
var headerKeys = []string{"code", "version", "opaque", "flag", "language", "remark", "extFields"}

// decodeJSONHeaderFast parses the JSON header clients send (flat fields,
// an extFields object of strings, no escapes) without reflection. It
// reports false on anything else, and the caller falls back to the general
// decoder, so it never decides what a valid header means — except that a
// header with more than MaxExtFields fields is refused (nil, true) before
// the general decoder spends memory on it.
func decodeJSONHeaderFast(b []byte) (*Command, bool) {
	p := jsonScan{b: b}
	if !p.byte('{') {
		return nil, false
	}
	c := newRequest()
	if p.peek('}') {
		p.i++
		return c, p.end()
	}
	for {
		key, _, ok := p.key()
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
			s, ok := p.language()
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
			if !p.ext(&c.ExtFields) {
				return nil, p.tooMany // too many fields: refused, not retried
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
	b       []byte
	i       int
	tooMany bool // an extFields object with more than MaxExtFields fields
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

// commonKeys are the field names clients send often, shared rather than
// allocated for each request; at most 64 (ext keeps a bit set of them).
var commonKeys = [...]string{"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname", "brokerName", "consumerGroup", "queueOffset", "maxMsgNums", "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType", "timestamp", "offset", "group", "delayLevel", "originMsgId", "originTopic", "code", "version", "opaque", "language", "remark", "extFields", "serializeTypeCurrentRPC", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n"}

// commonKey returns the index in commonKeys of a field name, or -1 (a
// switch on the bytes: no allocation, no hashing).
func commonKey(b []byte) int {
	switch string(b) {
	case "producerGroup":
		return 0
	case "topic":
		return 1
	case "defaultTopic":
		return 2
	case "defaultTopicQueueNums":
		return 3
	case "queueId":
		return 4
	case "sysFlag":
		return 5
	case "bornTimestamp":
		return 6
	case "flag":
		return 7
	case "properties":
		return 8
	case "reconsumeTimes":
		return 9
	case "unitMode":
		return 10
	case "maxReconsumeTimes":
		return 11
	case "batch":
		return 12
	case "bname":
		return 13
	case "brokerName":
		return 14
	case "consumerGroup":
		return 15
	case "queueOffset":
		return 16
	case "maxMsgNums":
		return 17
	case "commitOffset":
		return 18
	case "suspendTimeoutMillis":
		return 19
	case "subscription":
		return 20
	case "subVersion":
		return 21
	case "expressionType":
		return 22
	case "timestamp":
		return 23
	case "offset":
		return 24
	case "group":
		return 25
	case "delayLevel":
		return 26
	case "originMsgId":
		return 27
	case "originTopic":
		return 28
	case "code":
		return 29
	case "version":
		return 30
	case "opaque":
		return 31
	case "language":
		return 32
	case "remark":
		return 33
	case "extFields":
		return 34
	case "serializeTypeCurrentRPC":
		return 35
	case "a":
		return 36
	case "b":
		return 37
	case "c":
		return 38
	case "d":
		return 39
	case "e":
		return 40
	case "f":
		return 41
	case "g":
		return 42
	case "h":
		return 43
	case "i":
		return 44
	case "j":
		return 45
	case "k":
		return 46
	case "l":
		return 47
	case "m":
		return 48
	case "n":
		return 49
	}
	return -1
}

// key reads a JSON string, sharing the common ext field names; common is
// the name's index in commonKeys, or -1.
func (p *jsonScan) key() (name string, common int, ok bool) {
	p.ws()
	if i := p.i; i < len(p.b) && p.b[i] == '"' {
		for j := i + 1; j < len(p.b) && j-i <= 32; j++ {
			if c := p.b[j]; c == '"' {
				if k := commonKey(p.b[i+1 : j]); k >= 0 {
					p.i = j + 1
					return commonKeys[k], k, true
				}
				break
			} else if c == '\\' || c < 0x20 || c >= 0x80 {
				break
			}
		}
	}
	name, ok = p.str()
	return name, -1, ok
}

// language reads the header's language: the clients' names are shared
// (no allocation), others read as any string.
func (p *jsonScan) language() (string, bool) {
	p.ws()
	if i := p.i; i < len(p.b) && p.b[i] == '"' {
		if j := bytes.IndexByte(p.b[i+1:], '"'); j >= 0 && j <= 8 {
			for _, l := range languages {
				if string(p.b[i+1:i+1+j]) == l {
					p.i = i + j + 2
					return l, true
				}
			}
		}
	}
	return p.str()
}

// languages are the client languages RocketMQ names (LanguageCode).
var languages = [...]string{"GO", "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "RUST", "NODE_JS"}

// str reads a string. Escapes are decoded (RocketMQ properties carry
// \u0001 and \u0002 separators); surrogate escapes and invalid UTF-8 are
// left to the general decoder.
func (p *jsonScan) str() (string, bool) {
	var sb strings.Builder
	ok := p.strTo(&sb)
	return sb.String(), ok
}

// strTo reads a JSON string and writes its decoded bytes to sb.
func (p *jsonScan) strTo(sb *strings.Builder) bool {
	if !p.byte('"') {
		return false
	}
	start, base := p.i, sb.Len()
	// Most strings are plain ASCII without escapes: copied whole.
	for j := p.i; j < len(p.b); j++ {
		c := p.b[j]
		if c == '"' {
			p.i = j + 1
			sb.Write(p.b[start:j])
			return true
		}
		if c < 0x20 || c >= 0x80 || c == '\\' {
			break // the general loop below
		}
	}
	ascii := true
	escaped := false
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			if !escaped {
				sb.Write(p.b[start:p.i])
			}
			p.i++
			return ascii || utf8.ValidString(sb.String()[base:])
		case c < 0x20:
			return false
		case c >= 0x80:
			ascii = false
		case c == '\\':
			if !escaped {
				sb.Write(p.b[start:p.i])
				escaped = true
			}
			if p.i+1 >= len(p.b) {
				return false
			}
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				sb.WriteByte(e)
			case 'b':
				sb.WriteByte('\b')
			case 'f':
				sb.WriteByte('\f')
			case 'n':
				sb.WriteByte('\n')
			case 'r':
				sb.WriteByte('\r')
			case 't':
				sb.WriteByte('\t')
			case 'u':
				if p.i+4 > len(p.b) {
					return false
				}
				r, ok := hex4(p.b[p.i : p.i+4])
				if !ok || r >= 0xD800 && r <= 0xDFFF {
					return false
				}
				sb.WriteRune(r)
				p.i += 4
			default:
				return false
			}
			continue
		}
		if escaped {
			sb.WriteByte(c)
		}
		p.i++
	}
	return false
}

// hex4 reads the four hex digits of a \u escape (clients escape the
// property separators \x01 and \x02 so: a send's properties hold several).
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// number reads a JSON number (strict grammar) and reports whether it is an
// integer; text is its bytes in the header.
func (p *jsonScan) number() (text []byte, integer, ok bool) {
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
		return nil, false, false
	}
	integer = true
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		integer = false
		if digits() == 0 {
			return nil, false, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		integer = false
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, false, false
		}
	}
	return p.b[start:p.i], integer, true
}

// int32 reads an integer that fits 32 bits (parsed from the header's bytes:
// no allocation).
func (p *jsonScan) int32() (int32, bool) {
	text, integer, ok := p.number()
	if !ok || !integer {
		return 0, false
	}
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	var n int64
	for _, c := range text {
		n = n*10 + int64(c-'0')
		if n > math.MaxInt32+1 {
			return 0, false
		}
	}
	if neg {
		n = -n
	}
	if n > math.MaxInt32 || n < math.MinInt32 {
		return 0, false
	}
	return int32(n), true
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

// ext reads an object of string values into f. The values are decoded
// into one buffer that becomes one string, which every value is a piece of:
// one allocation for them all.
func (p *jsonScan) ext(f *Fields) bool {
	if !p.byte('{') {
		return false
	}
	if p.peek('}') {
		p.i++
		return true
	}
	type span struct {
		key        string
		start, end int
	}
	var spanBuf [24]span
	spans := spanBuf[:0]
	// Decoded values are no longer than the text left: one buffer for all,
	// which becomes their string.
	var vals strings.Builder
	vals.Grow(len(p.b) - p.i)
	// Keys all common and none twice (the usual header) need no dedupe.
	var seen uint64
	distinct := len(*f) == 0
	for {
		k, common, ok := p.key()
		if !ok || !p.byte(':') {
			return false
		}
		switch {
		case common < 0 || seen&(1<<common) != 0:
			distinct = false
		default:
			seen |= 1 << common
		}
		start := vals.Len()
		if !p.strTo(&vals) {
			return false
		}
		spans = append(spans, span{k, start, vals.Len()})
		if len(spans) > MaxExtFields {
			p.tooMany = true
			return false
		}
		if p.peek(',') {
			p.i++
			continue
		}
		if !p.byte('}') {
			return false
		}
		all := vals.String()
		out := slices.Grow(*f, len(spans)) // a second extFields object adds to the first, as in the general decoder
		for _, sp := range spans {
			out = append(out, Field{sp.key, all[sp.start:sp.end]})
		}
		if !distinct {
			out = out.dedupe()
		}
		*f = out
		return true
	}
}
