package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
)

// Serialize types of a header.
const (
	SerializeJSON     = 0
	SerializeRocketMQ = 1
)

// Flag bits.
const (
	FlagResponse = 1 << 0
	FlagOneway   = 1 << 1
)

// Version is the protocol version Rosetta's responses carry (RocketMQ
// 5.3.0's MQVersion ordinal; clients record it as the broker version).
const Version = 473

// ErrMalformed marks bytes that are not a remoting frame.
var ErrMalformed = errors.New("malformed remoting frame")

// Command is one RemotingCommand: a request, a response or a one-way
// request. Body aliases the decoded frame.
type Command struct {
	Code      int32
	Language  string
	Version   int32
	Opaque    int32
	Flag      int32
	Remark    string
	ExtFields Fields
	Body      []byte

	// Serialize is the header type the command arrived in.
	Serialize byte
}

// IsResponse reports whether the command answers a request.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether the request expects no answer.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// NewResponse makes the answer to req with code and remark.
func NewResponse(req *Command, code int32, remark string) *Command {
	r := &response{Command: Command{Code: code, Language: "GO", Version: Version, Opaque: req.Opaque, Flag: FlagResponse,
		Remark: remark}}
	r.ExtFields = r.ext[:0]
	return &r.Command
}

// response is a Command with room for the ext fields an answer usually
// has: one allocation for both.
type response struct {
	Command
	ext [8]Field
}

// request is a decoded Command with room for the ext fields clients' sends
// carry (13 from the Go client): one allocation for both.
type request struct {
	Command
	ext [16]Field
}

// newRequest is an empty decoded Command with room for its ext fields.
func newRequest() *Command {
	r := &request{}
	r.ExtFields = r.ext[:0]
	return &r.Command
}

// Ext returns an ext field ("" when absent).
func (c *Command) Ext(key string) string {
	v, _ := c.ExtFields.Get(key)
	return v
}

// SetExt sets an ext field.
func (c *Command) SetExt(key, value string) { c.ExtFields.Set(key, value) }

// Field is one ext field of a header.
type Field struct{ Key, Value string }

// Fields are a header's ext fields, each key once, in the order they
// arrived or were set (headers hold a dozen or so: a scan is cheaper than
// a map to build and to read).
type Fields []Field

// FieldsOf returns m's fields in key order.
func FieldsOf(m map[string]string) Fields {
	f := make(Fields, 0, len(m))
	for k, v := range m {
		f = append(f, Field{k, v})
	}
	sort.Slice(f, func(i, j int) bool { return f[i].Key < f[j].Key })
	return f
}

// Pairs makes fields of alternating keys and values (an odd last key is
// left out).
func Pairs(kv ...string) Fields {
	f := make(Fields, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		f = append(f, Field{kv[i], kv[i+1]})
	}
	return f
}

// Get returns the value of key.
func (f Fields) Get(key string) (string, bool) {
	for i := range f {
		if f[i].Key == key {
			return f[i].Value, true
		}
	}
	return "", false
}

// Set sets key's value, replacing the one it had.
func (f *Fields) Set(key, value string) {
	for i := range *f {
		if (*f)[i].Key == key {
			(*f)[i].Value = value
			return
		}
	}
	*f = append(*f, Field{key, value})
}

// Map returns the fields as a map.
func (f Fields) Map() map[string]string {
	m := make(map[string]string, len(f))
	for _, x := range f {
		m[x.Key] = x.Value
	}
	return m
}

// keyHash is a 6-bit hash of a key's length and first and last bytes.
func keyHash(k string) uint {
	if k == "" {
		return 0
	}
	return uint(len(k)*31+int(k[0])*7+int(k[len(k)-1])) & 63
}

// dedupe keeps one field per key, the last value given for it (as a JSON
// object's decoding does), at the place of its first.
func (f Fields) dedupe() Fields {
	if len(f) <= 64 {
		// Most headers have no repeated key, and their keys differ in
		// length or in their first or last byte: a 64-bit set of those
		// tells so without comparing keys.
		var seen uint64
		for i, x := range f {
			bit := uint64(1) << keyHash(x.Key)
			if seen&bit != 0 {
				break
			}
			seen |= bit
			if i == len(f)-1 {
				return f
			}
		}
		out := f[:0]
	next:
		for _, x := range f {
			for i := range out {
				if out[i].Key == x.Key {
					out[i].Value = x.Value
					continue next
				}
			}
			out = append(out, x)
		}
		return out
	}
	at := make(map[string]int, len(f))
	out := f[:0]
	for _, x := range f {
		if i, ok := at[x.Key]; ok {
			out[i].Value = x.Value
			continue
		}
		at[x.Key] = len(out)
		out = append(out, x)
	}
	return out
}

// languageCodes maps binary language codes to their names.
var languageCodes = []string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS"}

func languageName(code byte) string {
	if int(code) < len(languageCodes) {
		return languageCodes[code]
	}
	return "OTHER"
}

func languageCode(name string) byte {
	for i, n := range languageCodes {
		if n == name {
			return byte(i)
		}
	}
	return 7 // OTHER
}

// FrameLength reads the length word of a frame (what follows it).
func FrameLength(prefix [4]byte) int { return int(int32(binary.BigEndian.Uint32(prefix[:]))) }

// Bounds on a request header, far above what clients send (a send's
// properties are at most 32 KiB, as RocketMQ stores them): what decoding
// one header may allocate stays a small multiple of the frame.
const (
	MaxHeaderBytes = 256 << 10
	MaxExtFields   = 1024
)

// Decode parses a frame without its leading length word.
func Decode(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrMalformed, len(frame))
	}
	word := binary.BigEndian.Uint32(frame)
	typ, hlen := byte(word>>24), int(word&0xFFFFFF)
	if hlen > len(frame)-4 {
		return nil, fmt.Errorf("%w: header of %d bytes in a frame of %d", ErrMalformed, hlen, len(frame))
	}
	if hlen > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header of %d bytes, limit %d", ErrMalformed, hlen, MaxHeaderBytes)
	}
	header, body := frame[4:4+hlen], frame[4+hlen:]
	var c *Command
	var err error
	switch typ {
	case SerializeJSON:
		var ok bool
		if c, ok = decodeJSONHeaderFast(header); !ok {
			c, err = decodeJSONHeader(header)
		} else if c == nil {
			err = fmt.Errorf("%w: more than %d header fields", ErrMalformed, MaxExtFields)
		}
	case SerializeRocketMQ:
		c, err = decodeBinaryHeader(header)
	default:
		return nil, fmt.Errorf("%w: serialize type %d", ErrMalformed, typ)
	}
	if err == nil && len(c.ExtFields) > MaxExtFields {
		err = fmt.Errorf("%w: %d header fields, limit %d", ErrMalformed, len(c.ExtFields), MaxExtFields)
	}
	if err != nil {
		return nil, err
	}
	c.Serialize = typ
	if len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// jsonHeader is the JSON header; numbers may arrive as numbers or strings.
type jsonHeader struct {
	Code      json.Number       `json:"code"`
	Language  json.RawMessage   `json:"language"`
	Version   json.Number       `json:"version"`
	Opaque    json.Number       `json:"opaque"`
	Flag      json.Number       `json:"flag"`
	Remark    *string           `json:"remark"`
	ExtFields map[string]extVal `json:"extFields"`
}

// extVal accepts any JSON scalar as an ext field value (they should all be
// strings; some clients send numbers or booleans).
type extVal string

func (v *extVal) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*v = extVal(s)
		return nil
	}
	if string(b) == "null" {
		return nil
	}
	*v = extVal(b)
	return nil
}

func int32Field(n json.Number, name string) (int32, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q", ErrMalformed, name, n)
	}
	return int32(v), nil
}

func decodeJSONHeader(b []byte) (*Command, error) {
	var h jsonHeader
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: json header: %v", ErrMalformed, err)
	}
	c := &Command{ExtFields: make(Fields, 0, len(h.ExtFields))}
	var err error
	if c.Code, err = int32Field(h.Code, "code"); err != nil {
		return nil, err
	}
	if c.Version, err = int32Field(h.Version, "version"); err != nil {
		return nil, err
	}
	if c.Opaque, err = int32Field(h.Opaque, "opaque"); err != nil {
		return nil, err
	}
	if c.Flag, err = int32Field(h.Flag, "flag"); err != nil {
		return nil, err
	}
	if len(h.Language) > 0 {
		var name string
		if json.Unmarshal(h.Language, &name) == nil {
			c.Language = name
		} else if n, err := strconv.Atoi(string(h.Language)); err == nil && n >= 0 && n < 256 {
			c.Language = languageName(byte(n))
		}
	}
	if h.Remark != nil {
		c.Remark = *h.Remark
	}
	for k, v := range h.ExtFields {
		c.ExtFields = append(c.ExtFields, Field{k, string(v)})
	}
	sort.Slice(c.ExtFields, func(i, j int) bool { return c.ExtFields[i].Key < c.ExtFields[j].Key })
	return c, nil
}

// binReader reads the binary header with a sticky error.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: binary header field of %d bytes, %d left", ErrMalformed, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *binReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *binReader) i16() int16 {
	if v := r.take(2); v != nil {
		return int16(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (r *binReader) i32() int32 {
	if v := r.take(4); v != nil {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func decodeBinaryHeader(b []byte) (*Command, error) {
	r := &binReader{b: b}
	c := &Command{}
	c.Code = int32(r.i16())
	c.Language = languageName(r.u8())
	c.Version = int32(r.i16())
	c.Opaque = r.i32()
	c.Flag = r.i32()
	c.Remark = string(r.take(int(r.i32())))
	extLen := int(r.i32())
	ext := &binReader{b: r.take(extLen)}
	for ext.err == nil && len(ext.b) > 0 {
		if len(c.ExtFields) >= MaxExtFields {
			return nil, fmt.Errorf("%w: more than %d header fields", ErrMalformed, MaxExtFields)
		}
		k := string(ext.take(int(ext.i16())))
		v := string(ext.take(int(ext.i32())))
		c.ExtFields = append(c.ExtFields, Field{k, v})
	}
	c.ExtFields = c.ExtFields.dedupe()
	if r.err != nil {
		return nil, r.err
	}
	if ext.err != nil {
		return nil, ext.err
	}
	return c, nil
}

// AppendFrame appends c as a whole frame (length word included), with a
// JSON header. Ext fields are written in their order.
func AppendFrame(dst []byte, c *Command) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0) // length, type + header length
	hstart := len(dst)
	dst = appendJSONHeader(dst, c)
	hlen := len(dst) - hstart
	dst = append(dst, c.Body...)
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(SerializeJSON)<<24|uint32(hlen))
	return dst
}

func appendJSONHeader(dst []byte, c *Command) []byte {
	lang := c.Language
	if lang == "" {
		lang = "GO"
	}
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(c.Code), 10)
	dst = append(dst, `,"language":`...)
	dst = appendJSONString(dst, lang)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, int64(c.Version), 10)
	dst = append(dst, `,"opaque":`...)
	dst = strconv.AppendInt(dst, int64(c.Opaque), 10)
	dst = append(dst, `,"flag":`...)
	dst = strconv.AppendInt(dst, int64(c.Flag), 10)
	if c.Remark != "" {
		dst = append(dst, `,"remark":`...)
		dst = appendJSONString(dst, c.Remark)
	}
	dst = append(dst, `,"extFields":{`...)
	for i, f := range c.ExtFields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.Key)
		dst = append(dst, ':')
		dst = appendJSONString(dst, f.Value)
	}
	dst = append(dst, `},"serializeTypeCurrentRPC":"JSON"}`...)
	return dst
}

// appendJSONString appends s as a JSON string (valid UTF-8 assumed; invalid
// bytes are replaced, as encoding/json does).
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// AppendBinaryFrame appends c as a whole frame with a ROCKETMQ binary
// header (codes must fit 16 bits).
func AppendBinaryFrame(dst []byte, c *Command) []byte {
	be := binary.BigEndian
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	hstart := len(dst)
	dst = be.AppendUint16(dst, uint16(c.Code))
	dst = append(dst, languageCode(c.Language))
	dst = be.AppendUint16(dst, uint16(c.Version))
	dst = be.AppendUint32(dst, uint32(c.Opaque))
	dst = be.AppendUint32(dst, uint32(c.Flag))
	dst = be.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	extAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for _, f := range c.ExtFields {
		dst = be.AppendUint16(dst, uint16(len(f.Key)))
		dst = append(dst, f.Key...)
		dst = be.AppendUint32(dst, uint32(len(f.Value)))
		dst = append(dst, f.Value...)
	}
	be.PutUint32(dst[extAt:], uint32(len(dst)-extAt-4))
	hlen := len(dst) - hstart
	dst = append(dst, c.Body...)
	be.PutUint32(dst[start:], uint32(len(dst)-start-4))
	be.PutUint32(dst[start+4:], uint32(SerializeRocketMQ)<<24|uint32(hlen))
	return dst
}
