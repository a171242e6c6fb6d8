package packet

import "fmt"

// Connect is CONNECT: the protocol level it names, the session it asks
// for, the client's identifier, will and credentials.
type Connect struct {
	ProtocolName string
	Version      byte
	CleanStart   bool // 3.1.1's clean session
	KeepAlive    uint16
	ClientID     string
	Will         *Will
	Username     string
	HasUsername  bool
	Password     []byte
	HasPassword  bool
	Props        Properties
}

// Will is a CONNECT's will message.
type Will struct {
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
	Props   Properties
}

// Connack is CONNACK: Code is 3.1.1's return code or 5's reason code.
type Connack struct {
	SessionPresent bool
	Code           byte
	Props          Properties
}

// Publish is PUBLISH.
type Publish struct {
	Dup      bool
	QoS      byte
	Retain   bool
	Topic    string
	PacketID uint16
	Props    Properties
	Payload  []byte
}

// Ack is PUBACK, PUBREC, PUBREL or PUBCOMP.
type Ack struct {
	Kind     byte // PUBACK, PUBREC, PUBREL or PUBCOMP
	PacketID uint16
	Code     byte // level 5 reason code (0: success)
	Props    Properties
}

// Subscribe is SUBSCRIBE.
type Subscribe struct {
	PacketID uint16
	Props    Properties
	Filters  []Subscription
}

// Subscription is one topic filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter            string
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	RetainHandling    byte
}

// Suback is SUBACK: a return (reason) code per filter.
type Suback struct {
	PacketID uint16
	Props    Properties
	Codes    []byte
}

// Unsubscribe is UNSUBSCRIBE.
type Unsubscribe struct {
	PacketID uint16
	Props    Properties
	Filters  []string
}

// Unsuback is UNSUBACK (reason codes at level 5 only).
type Unsuback struct {
	PacketID uint16
	Props    Properties
	Codes    []byte
}

// Pingreq is PINGREQ.
type Pingreq struct{}

// Pingresp is PINGRESP.
type Pingresp struct{}

// Disconnect is DISCONNECT (a reason code and properties at level 5).
type Disconnect struct {
	Code  byte
	Props Properties
}

// Auth is AUTH (level 5).
type Auth struct {
	Code  byte
	Props Properties
}

func (*Connect) Type() byte     { return CONNECT }
func (*Connack) Type() byte     { return CONNACK }
func (*Publish) Type() byte     { return PUBLISH }
func (a *Ack) Type() byte       { return a.Kind }
func (*Subscribe) Type() byte   { return SUBSCRIBE }
func (*Suback) Type() byte      { return SUBACK }
func (*Unsubscribe) Type() byte { return UNSUBSCRIBE }
func (*Unsuback) Type() byte    { return UNSUBACK }
func (*Pingreq) Type() byte     { return PINGREQ }
func (*Pingresp) Type() byte    { return PINGRESP }
func (*Disconnect) Type() byte  { return DISCONNECT }
func (*Auth) Type() byte        { return AUTH }

// Protocol names by level.
const (
	nameMQTT   = "MQTT"
	nameMQIsdp = "MQIsdp"
)

func decodeConnect(d *decoder) (*Connect, error) {
	c := &Connect{}
	var err error
	if c.ProtocolName, err = d.string(); err != nil {
		return nil, err
	}
	if c.Version, err = d.byte(); err != nil {
		return nil, err
	}
	switch {
	case c.ProtocolName == nameMQIsdp && c.Version == V31, c.ProtocolName == nameMQTT && (c.Version == V311 || c.Version == V5):
	case c.ProtocolName == nameMQTT || c.ProtocolName == nameMQIsdp:
		return c, &Error{Code: CodeUnsupportedVer, Reason: fmt.Sprintf("unsupported protocol level %d", c.Version)}
	default:
		return nil, protocolError("protocol name %q", c.ProtocolName)
	}
	flags, err := d.byte()
	if err != nil {
		return nil, err
	}
	if flags&0x01 != 0 {
		return nil, malformed("CONNECT's reserved flag set")
	}
	c.CleanStart = flags&0x02 != 0
	willFlag, willQoS, willRetain := flags&0x04 != 0, flags>>3&0x03, flags&0x20 != 0
	c.HasPassword, c.HasUsername = flags&0x40 != 0, flags&0x80 != 0
	if !willFlag && (willQoS != 0 || willRetain) || willQoS > 2 {
		return nil, malformed("CONNECT's will flags %08b", flags)
	}
	if c.HasPassword && !c.HasUsername && c.Version < V5 {
		return nil, malformed("a password without a user name")
	}
	if c.KeepAlive, err = d.uint16(); err != nil {
		return nil, err
	}
	if c.Version == V5 {
		if c.Props, err = d.properties(CONNECT); err != nil {
			return nil, err
		}
	}
	if c.ClientID, err = d.string(); err != nil {
		return nil, err
	}
	if willFlag {
		w := &Will{QoS: willQoS, Retain: willRetain}
		if c.Version == V5 {
			if w.Props, err = d.properties(willPlace); err != nil {
				return nil, err
			}
		}
		if w.Topic, err = d.string(); err != nil {
			return nil, err
		}
		if w.Payload, err = d.binary(); err != nil {
			return nil, err
		}
		c.Will = w
	}
	if c.HasUsername {
		if c.Username, err = d.string(); err != nil {
			return nil, err
		}
	}
	if c.HasPassword {
		if c.Password, err = d.binary(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Connect) appendBody(dst []byte, _ byte) ([]byte, byte) {
	name := c.ProtocolName
	if name == "" {
		name = nameMQTT
		if c.Version == V31 {
			name = nameMQIsdp
		}
	}
	dst = appendString(dst, name)
	dst = append(dst, c.Version)
	var flags byte
	if c.CleanStart {
		flags |= 0x02
	}
	if w := c.Will; w != nil {
		flags |= 0x04 | w.QoS<<3
		if w.Retain {
			flags |= 0x20
		}
	}
	if c.HasPassword {
		flags |= 0x40
	}
	if c.HasUsername {
		flags |= 0x80
	}
	dst = appendUint16(append(dst, flags), c.KeepAlive)
	if c.Version == V5 {
		dst = appendProperties(dst, &c.Props)
	}
	dst = appendString(dst, c.ClientID)
	if w := c.Will; w != nil {
		if c.Version == V5 {
			dst = appendProperties(dst, &w.Props)
		}
		dst = appendBinary(appendString(dst, w.Topic), w.Payload)
	}
	if c.HasUsername {
		dst = appendString(dst, c.Username)
	}
	if c.HasPassword {
		dst = appendBinary(dst, c.Password)
	}
	return dst, 0
}

func decodeConnack(v byte, d *decoder) (*Connack, error) {
	flags, err := d.byte()
	if err != nil {
		return nil, err
	}
	if flags&^1 != 0 {
		return nil, malformed("CONNACK flags %08b", flags)
	}
	c := &Connack{SessionPresent: flags == 1}
	if c.Code, err = d.byte(); err != nil {
		return nil, err
	}
	if v == V5 {
		if c.Props, err = d.properties(CONNACK); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Connack) appendBody(dst []byte, v byte) ([]byte, byte) {
	var flags byte
	if c.SessionPresent {
		flags = 1
	}
	dst = append(dst, flags, c.Code)
	if v == V5 {
		dst = appendProperties(dst, &c.Props)
	}
	return dst, 0
}

func decodePublish(v byte, flags byte, body []byte) (*Publish, error) {
	p := &Publish{Dup: flags&0x08 != 0, QoS: flags >> 1 & 0x03, Retain: flags&0x01 != 0}
	if p.QoS == 3 {
		return nil, malformed("PUBLISH of QoS 3")
	}
	if p.QoS == 0 && p.Dup {
		return nil, malformed("a QoS 0 PUBLISH marked duplicate")
	}
	d := &decoder{b: body}
	var err error
	if p.Topic, err = d.string(); err != nil {
		return nil, err
	}
	if p.QoS > 0 {
		if p.PacketID, err = d.uint16(); err != nil {
			return nil, err
		}
		if p.PacketID == 0 {
			return nil, malformed("PUBLISH with packet identifier 0")
		}
	}
	if v == V5 {
		if p.Props, err = d.properties(PUBLISH); err != nil {
			return nil, err
		}
	}
	p.Payload = d.b
	return p, nil
}

func (p *Publish) appendBody(dst []byte, v byte) ([]byte, byte) {
	flags := p.QoS << 1
	if p.Dup {
		flags |= 0x08
	}
	if p.Retain {
		flags |= 0x01
	}
	dst = appendString(dst, p.Topic)
	if p.QoS > 0 {
		dst = appendUint16(dst, p.PacketID)
	}
	if v == V5 {
		dst = appendProperties(dst, &p.Props)
	}
	return append(dst, p.Payload...), flags
}

func decodeAck(v, kind byte, d *decoder) (*Ack, error) {
	a := &Ack{Kind: kind}
	var err error
	if a.PacketID, err = d.uint16(); err != nil {
		return nil, err
	}
	if a.PacketID == 0 {
		return nil, malformed("%s with packet identifier 0", TypeName(kind))
	}
	if v == V5 && len(d.b) > 0 {
		if a.Code, err = d.byte(); err != nil {
			return nil, err
		}
		if len(d.b) > 0 {
			if a.Props, err = d.properties(kind); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

func (a *Ack) appendBody(dst []byte, v byte) ([]byte, byte) {
	dst = appendUint16(dst, a.PacketID)
	if v == V5 && (a.Code != 0 || a.Props.size() > 0) {
		dst = appendProperties(append(dst, a.Code), &a.Props)
	}
	if a.Kind == PUBREL {
		return dst, 0b0010
	}
	return dst, 0
}

func decodeSubscribe(v byte, d *decoder) (*Subscribe, error) {
	s := &Subscribe{}
	var err error
	if s.PacketID, err = d.uint16(); err != nil {
		return nil, err
	}
	if s.PacketID == 0 {
		return nil, malformed("SUBSCRIBE with packet identifier 0")
	}
	if v == V5 {
		if s.Props, err = d.properties(SUBSCRIBE); err != nil {
			return nil, err
		}
		if len(s.Props.SubscriptionIDs) > 1 {
			return nil, protocolError("a SUBSCRIBE with %d subscription identifiers", len(s.Props.SubscriptionIDs))
		}
	}
	for len(d.b) > 0 {
		var sub Subscription
		if sub.Filter, err = d.string(); err != nil {
			return nil, err
		}
		opts, err := d.byte()
		if err != nil {
			return nil, err
		}
		sub.QoS = opts & 0x03
		if v == V5 {
			sub.NoLocal, sub.RetainAsPublished, sub.RetainHandling = opts&0x04 != 0, opts&0x08 != 0, opts>>4&0x03
			if opts&0xc0 != 0 || sub.RetainHandling == 3 {
				return nil, malformed("subscription options %08b", opts)
			}
		} else if opts&0xfc != 0 {
			return nil, malformed("requested QoS byte %08b", opts)
		}
		if sub.QoS == 3 {
			return nil, malformed("a subscription of QoS 3")
		}
		s.Filters = append(s.Filters, sub)
	}
	if len(s.Filters) == 0 {
		return nil, protocolError("a SUBSCRIBE without topic filters")
	}
	return s, nil
}

func (s *Subscribe) appendBody(dst []byte, v byte) ([]byte, byte) {
	dst = appendUint16(dst, s.PacketID)
	if v == V5 {
		dst = appendProperties(dst, &s.Props)
	}
	for _, f := range s.Filters {
		opts := f.QoS
		if v == V5 {
			if f.NoLocal {
				opts |= 0x04
			}
			if f.RetainAsPublished {
				opts |= 0x08
			}
			opts |= f.RetainHandling << 4
		}
		dst = append(appendString(dst, f.Filter), opts)
	}
	return dst, 0b0010
}

func decodeSuback(v byte, d *decoder) (*Suback, error) {
	s := &Suback{}
	var err error
	if s.PacketID, err = d.uint16(); err != nil {
		return nil, err
	}
	if v == V5 {
		if s.Props, err = d.properties(SUBACK); err != nil {
			return nil, err
		}
	}
	s.Codes, d.b = d.b, nil
	return s, nil
}

func (s *Suback) appendBody(dst []byte, v byte) ([]byte, byte) {
	dst = appendUint16(dst, s.PacketID)
	if v == V5 {
		dst = appendProperties(dst, &s.Props)
	}
	return append(dst, s.Codes...), 0
}

func decodeUnsubscribe(v byte, d *decoder) (*Unsubscribe, error) {
	u := &Unsubscribe{}
	var err error
	if u.PacketID, err = d.uint16(); err != nil {
		return nil, err
	}
	if u.PacketID == 0 {
		return nil, malformed("UNSUBSCRIBE with packet identifier 0")
	}
	if v == V5 {
		if u.Props, err = d.properties(UNSUBSCRIBE); err != nil {
			return nil, err
		}
	}
	for len(d.b) > 0 {
		f, err := d.string()
		if err != nil {
			return nil, err
		}
		u.Filters = append(u.Filters, f)
	}
	if len(u.Filters) == 0 {
		return nil, protocolError("an UNSUBSCRIBE without topic filters")
	}
	return u, nil
}

func (u *Unsubscribe) appendBody(dst []byte, v byte) ([]byte, byte) {
	dst = appendUint16(dst, u.PacketID)
	if v == V5 {
		dst = appendProperties(dst, &u.Props)
	}
	for _, f := range u.Filters {
		dst = appendString(dst, f)
	}
	return dst, 0b0010
}

func decodeUnsuback(v byte, d *decoder) (*Unsuback, error) {
	u := &Unsuback{}
	var err error
	if u.PacketID, err = d.uint16(); err != nil {
		return nil, err
	}
	if v == V5 {
		if u.Props, err = d.properties(UNSUBACK); err != nil {
			return nil, err
		}
		u.Codes, d.b = d.b, nil
	}
	return u, nil
}

func (u *Unsuback) appendBody(dst []byte, v byte) ([]byte, byte) {
	dst = appendUint16(dst, u.PacketID)
	if v == V5 {
		dst = append(appendProperties(dst, &u.Props), u.Codes...)
	}
	return dst, 0
}

func (*Pingreq) appendBody(dst []byte, _ byte) ([]byte, byte)  { return dst, 0 }
func (*Pingresp) appendBody(dst []byte, _ byte) ([]byte, byte) { return dst, 0 }

func decodeDisconnect(v byte, d *decoder) (*Disconnect, error) {
	p := &Disconnect{}
	var err error
	if v == V5 && len(d.b) > 0 {
		if p.Code, err = d.byte(); err != nil {
			return nil, err
		}
		if len(d.b) > 0 {
			if p.Props, err = d.properties(DISCONNECT); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func (p *Disconnect) appendBody(dst []byte, v byte) ([]byte, byte) {
	if v == V5 && (p.Code != 0 || p.Props.size() > 0) {
		dst = appendProperties(append(dst, p.Code), &p.Props)
	}
	return dst, 0
}

func decodeAuth(d *decoder) (*Auth, error) {
	a := &Auth{}
	var err error
	if len(d.b) > 0 {
		if a.Code, err = d.byte(); err != nil {
			return nil, err
		}
		if len(d.b) > 0 {
			if a.Props, err = d.properties(AUTH); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

func (a *Auth) appendBody(dst []byte, _ byte) ([]byte, byte) {
	if a.Code != 0 || a.Props.size() > 0 {
		dst = appendProperties(append(dst, a.Code), &a.Props)
	}
	return dst, 0
}
