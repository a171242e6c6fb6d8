package packet

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"testing"

	paho "github.com/eclipse/paho.golang/packets"
	paho3 "github.com/eclipse/paho.mqtt.golang/packets"
)

// read decodes one encoded packet at level v.
func read(t testing.TB, v byte, b []byte) Packet {
	t.Helper()
	h, body, err := ReadPacket(bufio.NewReader(bytes.NewReader(b)), 1<<20)
	if err != nil {
		t.Fatalf("read %x: %v", b, err)
	}
	p, err := Decode(v, h, body)
	if err != nil {
		t.Fatalf("decode %x: %v", b, err)
	}
	return p
}

func u32(v uint32) *uint32 { return &v }
func u16(v uint16) *uint16 { return &v }
func b8(v byte) *byte      { return &v }

// TestPahoV5: packets paho.golang writes decode to what it wrote, and
// packets encoded here decode in paho.golang to what was encoded.
func TestPahoV5(t *testing.T) {
	connect := &paho.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: "dev-1", KeepAlive: 30, CleanStart: true,
		UsernameFlag: true, Username: "alice", PasswordFlag: true, Password: []byte("secret"),
		WillFlag: true, WillQOS: 1, WillRetain: true, WillTopic: "status/dev-1", WillMessage: []byte("gone"),
		Properties: &paho.Properties{SessionExpiryInterval: u32(3600), ReceiveMaximum: u16(20), TopicAliasMaximum: u16(10),
			MaximumPacketSize: u32(1 << 20), User: []paho.User{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}},
		WillProperties: &paho.Properties{WillDelayInterval: u32(5)}}
	cp := paho.NewControlPacket(paho.CONNECT)
	cp.Content = connect
	var buf bytes.Buffer
	if _, err := cp.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	c := read(t, V5, buf.Bytes()).(*Connect)
	if c.Version != V5 || c.ClientID != "dev-1" || c.KeepAlive != 30 || !c.CleanStart || c.Username != "alice" || string(c.Password) != "secret" ||
		c.Will == nil || c.Will.QoS != 1 || !c.Will.Retain || c.Will.Topic != "status/dev-1" || string(c.Will.Payload) != "gone" ||
		c.Props.SessionExpiry != 3600 || c.Props.ReceiveMaximum != 20 || c.Props.TopicAliasMaximum != 10 || c.Props.MaximumPacketSize != 1<<20 ||
		len(c.Props.User) != 2 || c.Props.User[1].Value != "2" || c.Will.Props.WillDelay != 5 ||
		!c.Props.Has(PropSessionExpiry) || c.Props.Has(PropAuthMethod) {
		t.Fatalf("connect %+v will %+v", c, c.Will)
	}

	pub := paho.NewControlPacket(paho.PUBLISH)
	pub.Content = &paho.Publish{Topic: "a/b", QoS: 2, PacketID: 7, Retain: true, Duplicate: true, Payload: []byte("payload"),
		Properties: &paho.Properties{PayloadFormat: b8(1), ResponseTopic: "r/1", CorrelationData: []byte{1, 2}, TopicAlias: u16(3),
			User: []paho.User{{Key: "k", Value: "v"}}}}
	buf.Reset()
	if _, err := pub.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	p := read(t, V5, buf.Bytes()).(*Publish)
	if p.Topic != "a/b" || p.QoS != 2 || p.PacketID != 7 || !p.Retain || !p.Dup || string(p.Payload) != "payload" ||
		p.Props.PayloadFormat != 1 || p.Props.ResponseTopic != "r/1" || !bytes.Equal(p.Props.CorrelationData, []byte{1, 2}) ||
		p.Props.TopicAlias != 3 || len(p.Props.User) != 1 {
		t.Fatalf("publish %+v", p)
	}

	sub := paho.NewControlPacket(paho.SUBSCRIBE)
	sub.Content = &paho.Subscribe{PacketID: 9, Properties: &paho.Properties{SubscriptionIdentifier: func() *int { v := 42; return &v }()},
		Subscriptions: []paho.SubOptions{{Topic: "a/+", QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}, {Topic: "#", QoS: 2}}}
	buf.Reset()
	if _, err := sub.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s := read(t, V5, buf.Bytes()).(*Subscribe)
	want := []Subscription{{Filter: "a/+", QoS: 1, NoLocal: true, RetainAsPublished: true, RetainHandling: 2}, {Filter: "#", QoS: 2}}
	if s.PacketID != 9 || !reflect.DeepEqual(s.Filters, want) || len(s.Props.SubscriptionIDs) != 1 || s.Props.SubscriptionIDs[0] != 42 {
		t.Fatalf("subscribe %+v", s)
	}

	// The other way: what is encoded here, paho.golang reads.
	out := Append(nil, V5, &Connack{SessionPresent: true, Code: 0, Props: func() Properties {
		var pr Properties
		pr.Set(PropAssignedClientID)
		pr.AssignedClientID = "auto-1"
		pr.Set(PropTopicAliasMaximum)
		pr.TopicAliasMaximum = 16
		pr.Set(PropServerKeepAlive)
		pr.ServerKeepAlive = 60
		return pr
	}()})
	got, err := paho.ReadPacket(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	ca := got.Content.(*paho.Connack)
	if !ca.SessionPresent || ca.ReasonCode != 0 || ca.Properties.AssignedClientID != "auto-1" || *ca.Properties.TopicAliasMaximum != 16 ||
		*ca.Properties.ServerKeepAlive != 60 {
		t.Fatalf("connack %+v %+v", ca, ca.Properties)
	}
	out = Append(nil, V5, &Publish{Topic: "x/y", QoS: 1, PacketID: 300, Payload: bytes.Repeat([]byte("z"), 200),
		Props: Properties{SubscriptionIDs: []int{5, 700}, User: []UserProperty{{"h", "v"}}}})
	got, err = paho.ReadPacket(bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	pp := got.Content.(*paho.Publish)
	if pp.Topic != "x/y" || pp.QoS != 1 || pp.PacketID != 300 || len(pp.Payload) != 200 || len(pp.Properties.User) != 1 {
		t.Fatalf("publish %+v", pp)
	}
	for _, a := range []*Ack{{Kind: PUBACK, PacketID: 1}, {Kind: PUBREC, PacketID: 2, Code: 0x10}, {Kind: PUBREL, PacketID: 3},
		{Kind: PUBCOMP, PacketID: 4, Code: 0x92, Props: Properties{ReasonString: "gone", present: 1 << PropReasonString}}} {
		got, err := paho.ReadPacket(bytes.NewReader(Append(nil, V5, a)))
		if err != nil || got.PacketID() != a.PacketID {
			t.Fatalf("%s: %v %v", TypeName(a.Kind), got, err)
		}
		if back := read(t, V5, Append(nil, V5, a)).(*Ack); !reflect.DeepEqual(back, a) {
			t.Fatalf("%s: %+v, want %+v", TypeName(a.Kind), back, a)
		}
	}
}

// TestPahoV311: the 3.1.1 codec against paho.mqtt.golang's.
func TestPahoV311(t *testing.T) {
	cp := paho3.NewControlPacket(paho3.Connect).(*paho3.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion, cp.ClientIdentifier, cp.Keepalive, cp.CleanSession = "MQTT", 4, "c1", 10, true
	cp.WillFlag, cp.WillQos, cp.WillTopic, cp.WillMessage = true, 2, "w", []byte("bye")
	cp.UsernameFlag, cp.Username = true, "u"
	var buf bytes.Buffer
	if err := cp.Write(&buf); err != nil {
		t.Fatal(err)
	}
	c := read(t, V311, buf.Bytes()).(*Connect)
	if c.Version != V311 || c.ClientID != "c1" || c.KeepAlive != 10 || !c.CleanStart || c.Will.QoS != 2 || c.Will.Topic != "w" ||
		string(c.Will.Payload) != "bye" || c.Username != "u" || c.HasPassword {
		t.Fatalf("connect %+v", c)
	}
	pub := paho3.NewControlPacket(paho3.Publish).(*paho3.PublishPacket)
	pub.TopicName, pub.Qos, pub.MessageID, pub.Payload, pub.Retain = "t/1", 1, 5, []byte("hello"), true
	buf.Reset()
	if err := pub.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if p := read(t, V311, buf.Bytes()).(*Publish); p.Topic != "t/1" || p.QoS != 1 || p.PacketID != 5 || string(p.Payload) != "hello" || !p.Retain {
		t.Fatalf("publish %+v", p)
	}
	for _, p := range []Packet{
		&Connack{SessionPresent: true},
		&Publish{Topic: "a", QoS: 2, PacketID: 9, Payload: []byte("x")},
		&Ack{Kind: PUBREL, PacketID: 9},
		&Suback{PacketID: 3, Codes: []byte{0, 1, 0x80}},
		&Unsuback{PacketID: 4},
		&Pingresp{},
	} {
		got, err := paho3.ReadPacket(bytes.NewReader(Append(nil, V311, p)))
		if err != nil {
			t.Fatalf("%s: %v", TypeName(p.Type()), err)
		}
		if d := got.Details(); p.Type() != PINGRESP && p.Type() != CONNACK && d.MessageID == 0 {
			t.Fatalf("%s: %v", TypeName(p.Type()), got)
		}
	}
}

// TestMalformed: what the specification calls malformed or a protocol
// error is refused with the right reason code.
func TestMalformed(t *testing.T) {
	for name, c := range map[string]struct {
		v      byte
		header byte
		body   []byte
		code   byte
	}{
		"qos 3":               {V311, PUBLISH<<4 | 0x06, []byte{0, 1, 'a'}, CodeMalformed},
		"subscribe flags":     {V311, SUBSCRIBE << 4, []byte{0, 1, 0, 1, 'a', 0}, CodeMalformed},
		"no filters":          {V311, SUBSCRIBE<<4 | 2, []byte{0, 1}, CodeProtocolError},
		"string U+0000":       {V311, PUBLISH << 4, []byte{0, 2, 'a', 0}, CodeMalformed},
		"invalid utf-8":       {V311, PUBLISH << 4, []byte{0, 2, 0xc3, 0x28}, CodeMalformed},
		"truncated":           {V311, PUBLISH<<4 | 2, []byte{0, 5, 'a'}, CodeMalformed},
		"packet id 0":         {V311, PUBLISH<<4 | 2, []byte{0, 1, 'a', 0, 0}, CodeMalformed},
		"reserved flag":       {V311, CONNECT << 4, append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x01, 0, 10}, 0, 0), CodeMalformed},
		"bad protocol":        {V311, CONNECT << 4, []byte{0, 4, 'M', 'Q', 'T', 'X', 4, 0, 0, 10, 0, 0}, CodeProtocolError},
		"bad level":           {V311, CONNECT << 4, []byte{0, 4, 'M', 'Q', 'T', 'T', 9, 0, 0, 10, 0, 0}, CodeUnsupportedVer},
		"duplicate property":  {V5, PUBLISH << 4, []byte{0, 1, 'a', 4, 0x01, 1, 0x01, 1}, CodeProtocolError},
		"misplaced property":  {V5, PUBLISH << 4, []byte{0, 1, 'a', 5, 0x11, 0, 0, 0, 1}, CodeProtocolError},
		"unknown property":    {V5, PUBLISH << 4, []byte{0, 1, 'a', 2, 0x7e, 0}, CodeMalformed},
		"trailing bytes":      {V311, PUBACK << 4, []byte{0, 1, 9}, CodeMalformed},
		"auth at 3.1.1":       {V311, AUTH << 4, nil, CodeProtocolError},
		"subscription opts":   {V5, SUBSCRIBE<<4 | 2, []byte{0, 1, 0, 0, 1, 'a', 0xc0}, CodeMalformed},
		"dup at qos 0":        {V311, PUBLISH<<4 | 0x08, []byte{0, 1, 'a'}, CodeMalformed},
		"receive maximum 0":   {V5, CONNECT << 4, []byte{0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 10, 3, 0x21, 0, 0, 0, 0}, CodeProtocolError},
		"long varint":         {V5, PUBLISH << 4, []byte{0, 1, 'a', 0x80, 0x80, 0x80, 0x80, 0x01}, CodeMalformed},
		"will flags, no will": {V311, CONNECT << 4, []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x08, 0, 10, 0, 0}, CodeMalformed},
	} {
		_, err := Decode(c.v, c.header, c.body)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != c.code {
			t.Errorf("%s: %v, want code 0x%x", name, err, c.code)
		}
	}
	// An oversize packet is refused before its body is read; a remaining
	// length of five bytes is malformed.
	r := bufio.NewReader(bytes.NewReader([]byte{PUBLISH << 4, 0xff, 0xff, 0x03}))
	if _, _, err := ReadPacket(r, 1024); err != ErrTooLarge {
		t.Fatalf("oversize: %v", err)
	}
	r = bufio.NewReader(bytes.NewReader([]byte{PUBLISH << 4, 0xff, 0xff, 0xff, 0xff, 0x01}))
	if _, _, err := ReadPacket(r, 1<<30); err == nil {
		t.Fatal("five-byte remaining length accepted")
	}
}

// FuzzDecode: no bytes make the decoder panic, and what decodes encodes
// to bytes that decode to the same packet.
func FuzzDecode(f *testing.F) {
	f.Add(V5, Append(nil, V5, &Publish{Topic: "a/b", QoS: 1, PacketID: 3, Payload: []byte("x"),
		Props: Properties{User: []UserProperty{{"k", "v"}}, SubscriptionIDs: []int{1}}}))
	f.Add(V311, Append(nil, V311, &Subscribe{PacketID: 1, Filters: []Subscription{{Filter: "a/#", QoS: 1}}}))
	f.Add(V5, Append(nil, V5, &Connect{Version: V5, ClientID: "c", Will: &Will{Topic: "w", Payload: []byte("p")},
		HasUsername: true, Username: "u"}))
	f.Add(V5, Append(nil, V5, &Disconnect{Code: 0x8e}))
	f.Fuzz(func(t *testing.T, v byte, b []byte) {
		if v != V311 && v != V5 {
			v = V311 + v%2
		}
		h, body, err := ReadPacket(bufio.NewReader(bytes.NewReader(b)), 1<<20)
		if err != nil {
			return
		}
		p, err := Decode(v, h, body)
		if err != nil {
			return
		}
		if c, ok := p.(*Connect); ok {
			v = c.Version
		}
		again, err := Decode(v, Append(nil, v, p)[0], body2(t, v, p))
		if err != nil {
			t.Fatalf("%T re-encoded does not decode: %v", p, err)
		}
		if !reflect.DeepEqual(normalize(again), normalize(p)) {
			t.Fatalf("%T: %+v, re-encoded %+v", p, p, again)
		}
	})
}

// body2 is p encoded at v without its fixed header.
func body2(t *testing.T, v byte, p Packet) []byte {
	h, body, err := ReadPacket(bufio.NewReader(bytes.NewReader(Append(nil, v, p))), 1<<30)
	if err != nil || h>>4 != p.Type() {
		t.Fatalf("re-read: %v", err)
	}
	return body
}

// normalize clears what encoding does not keep apart: empty and nil
// slices, the protocol name's default.
func normalize(p Packet) Packet {
	switch x := p.(type) {
	case *Publish:
		if len(x.Payload) == 0 {
			x.Payload = nil
		}
	case *Suback:
		if len(x.Codes) == 0 {
			x.Codes = nil
		}
	case *Unsuback:
		if len(x.Codes) == 0 {
			x.Codes = nil
		}
	case *Connect:
		if len(x.Password) == 0 {
			x.Password = nil
		}
		if x.Will != nil && len(x.Will.Payload) == 0 {
			x.Will.Payload = nil
		}
	}
	return p
}
