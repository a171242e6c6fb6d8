package protocol

import (
	"encoding/binary"
	"reflect"
	"testing"
)

// goClientFrame is a request as rocketmq-client-go v2 writes it: JSON
// header, language "GO", version 317.
func goClientFrame(body []byte) []byte {
	h := `{"code":105,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{"topic":"TopicTest"}}`
	f := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)+len(body)))
	f = binary.BigEndian.AppendUint32(f, uint32(len(h)))
	f = append(f, h...)
	return append(f, body...)
}

func TestDecodeGoClientRequest(t *testing.T) {
	f := goClientFrame([]byte("body"))
	if n := FrameLength([4]byte(f[:4])); n != len(f)-4 {
		t.Fatalf("frame length %d, want %d", n, len(f)-4)
	}
	c, err := Decode(f[4:])
	if err != nil {
		t.Fatal(err)
	}
	if c.Code != GetRouteInfoByTopic || c.Language != "GO" || c.Version != 317 || c.Opaque != 7 || c.IsResponse() ||
		c.Ext("topic") != "TopicTest" || string(c.Body) != "body" {
		t.Fatalf("%+v", c)
	}
}

func TestRoundTripBothHeaders(t *testing.T) {
	c := &Command{Code: PopMessage, Language: "JAVA", Version: 473, Opaque: -5, Flag: FlagOneway,
		Remark: "quote \" and \u00e9", ExtFields: Fields{{"a", "1"}, {"b\n", "x\x01y"}}, Body: []byte{0, 1, 2}}
	got, err := Decode(AppendFrame(nil, c)[4:])
	if err != nil {
		t.Fatal(err)
	}
	got.Serialize = 0
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("json round trip:\n%+v\n%+v", got, c)
	}
	c.Code = SendMessage // binary codes are 16 bits
	got, err = Decode(AppendBinaryFrame(nil, c)[4:])
	if err != nil {
		t.Fatal(err)
	}
	if got.Serialize != SerializeRocketMQ {
		t.Fatal("serialize type not recorded")
	}
	got.Serialize = 0
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("binary round trip:\n%+v\n%+v", got, c)
	}
}

func TestResponseFlags(t *testing.T) {
	req := &Command{Code: SendMessage, Opaque: 42, Flag: FlagOneway}
	if !req.IsOneway() {
		t.Fatal("one-way flag")
	}
	resp := NewResponse(req, TopicNotExist, "no topic")
	if !resp.IsResponse() || resp.Opaque != 42 || resp.Code != TopicNotExist {
		t.Fatalf("%+v", resp)
	}
}

// FuzzDecode: arbitrary frames never panic the decoder, and a decoded
// command re-encodes (JSON) to one that decodes to the same command.
func FuzzDecode(f *testing.F) {
	f.Add(goClientFrame(nil)[4:])
	f.Add(goClientFrame([]byte("x"))[4:])
	f.Add(AppendBinaryFrame(nil, &Command{Code: 11, Language: "GO", ExtFields: Fields{{"k", "v"}}, Body: []byte("b")})[4:])
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(AppendFrame(nil, c)[4:])
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		again.Serialize = c.Serialize
		if again.Code != c.Code || again.Opaque != c.Opaque || again.Flag != c.Flag || len(again.ExtFields) != len(c.ExtFields) ||
			string(again.Body) != string(c.Body) {
			t.Fatalf("round trip changed the command:\n%+v\n%+v", c, again)
		}
	})
}

// FuzzJSONHeaderFast: whenever the fast JSON header decoder accepts a
// header, the general decoder reads the same command from it.
func FuzzJSONHeaderFast(f *testing.F) {
	f.Add([]byte(`{"code":105,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{"topic":"TopicTest"}}`))
	f.Add([]byte(`{"code":0,"flag":1,"remark":null,"extFields":null,"serializeTypeCurrentRPC":"JSON","x":1.5e3,"y":true}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := decodeJSONHeaderFast(b)
		if !ok {
			return
		}
		slow, err := decodeJSONHeader(b)
		if err != nil {
			t.Fatalf("fast accepted what the general decoder refuses (%v): %q", err, b)
		}
		if fast.Code != slow.Code || fast.Version != slow.Version || fast.Opaque != slow.Opaque || fast.Flag != slow.Flag ||
			fast.Language != slow.Language || fast.Remark != slow.Remark || !reflect.DeepEqual(fast.ExtFields.Map(), slow.ExtFields.Map()) {
			t.Fatalf("decoders differ on %q:\n%+v\n%+v", b, fast, slow)
		}
	})
}

func TestJSONHeaderFastEscapes(t *testing.T) {
	h := []byte(`{"code":10,"language":"GO","extFields":{"properties":"UNIQ_KEY\u0001abc\u0002TAGS\u0001T\u0002","q":"a\"b\\c\/d\n\u00e9"}}`)
	fast, ok := decodeJSONHeaderFast(h)
	if !ok {
		t.Fatal("fast decoder refused client properties")
	}
	slow, err := decodeJSONHeader(h)
	if err != nil || !reflect.DeepEqual(fast.ExtFields.Map(), slow.ExtFields.Map()) {
		t.Fatalf("%v\n%q\n%q", err, fast.ExtFields, slow.ExtFields)
	}
}
