package packet

// Properties are a level 5 packet's properties. Which are present is kept
// apart from their values (Has); User properties and a PUBLISH's
// subscription identifiers may repeat, the others may not.
type Properties struct {
	present uint64 // bit id: property id present

	PayloadFormat       byte
	MessageExpiry       uint32
	ContentType         string
	ResponseTopic       string
	CorrelationData     []byte
	SubscriptionIDs     []int
	SessionExpiry       uint32
	AssignedClientID    string
	ServerKeepAlive     uint16
	AuthMethod          string
	AuthData            []byte
	RequestProblemInfo  byte
	WillDelay           uint32
	RequestResponseInfo byte
	ResponseInfo        string
	ServerReference     string
	ReasonString        string
	ReceiveMaximum      uint16
	TopicAliasMaximum   uint16
	TopicAlias          uint16
	MaximumQoS          byte
	RetainAvailable     byte
	User                []UserProperty
	MaximumPacketSize   uint32
	WildcardAvailable   byte
	SubIDAvailable      byte
	SharedAvailable     byte
}

// UserProperty is a name-value pair (order and repetition kept).
type UserProperty struct {
	Key, Value string
}

// Property identifiers.
const (
	PropPayloadFormat       byte = 0x01
	PropMessageExpiry       byte = 0x02
	PropContentType         byte = 0x03
	PropResponseTopic       byte = 0x08
	PropCorrelationData     byte = 0x09
	PropSubscriptionID      byte = 0x0B
	PropSessionExpiry       byte = 0x11
	PropAssignedClientID    byte = 0x12
	PropServerKeepAlive     byte = 0x13
	PropAuthMethod          byte = 0x15
	PropAuthData            byte = 0x16
	PropRequestProblemInfo  byte = 0x17
	PropWillDelay           byte = 0x18
	PropRequestResponseInfo byte = 0x19
	PropResponseInfo        byte = 0x1A
	PropServerReference     byte = 0x1C
	PropReasonString        byte = 0x1F
	PropReceiveMaximum      byte = 0x21
	PropTopicAliasMaximum   byte = 0x22
	PropTopicAlias          byte = 0x23
	PropMaximumQoS          byte = 0x24
	PropRetainAvailable     byte = 0x25
	PropUser                byte = 0x26
	PropMaximumPacketSize   byte = 0x27
	PropWildcardAvailable   byte = 0x28
	PropSubIDAvailable      byte = 0x29
	PropSharedAvailable     byte = 0x2A
)

// Has reports whether property id is present.
func (p *Properties) Has(id byte) bool { return id < 64 && p.present&(1<<id) != 0 }

// Set marks property id present (its value set by the caller).
func (p *Properties) Set(id byte) { p.present |= 1 << id }

// Where each property may appear: the packets of propertyPlaces[id], a
// will's properties as willPlace.
const willPlace = 16

var propertyPlaces = map[byte]uint32{
	PropPayloadFormat:       bit(PUBLISH) | bit(willPlace),
	PropMessageExpiry:       bit(PUBLISH) | bit(willPlace),
	PropContentType:         bit(PUBLISH) | bit(willPlace),
	PropResponseTopic:       bit(PUBLISH) | bit(willPlace),
	PropCorrelationData:     bit(PUBLISH) | bit(willPlace),
	PropSubscriptionID:      bit(PUBLISH) | bit(SUBSCRIBE),
	PropSessionExpiry:       bit(CONNECT) | bit(CONNACK) | bit(DISCONNECT),
	PropAssignedClientID:    bit(CONNACK),
	PropServerKeepAlive:     bit(CONNACK),
	PropAuthMethod:          bit(CONNECT) | bit(CONNACK) | bit(AUTH),
	PropAuthData:            bit(CONNECT) | bit(CONNACK) | bit(AUTH),
	PropRequestProblemInfo:  bit(CONNECT),
	PropWillDelay:           bit(willPlace),
	PropRequestResponseInfo: bit(CONNECT),
	PropResponseInfo:        bit(CONNACK),
	PropServerReference:     bit(CONNACK) | bit(DISCONNECT),
	PropReasonString:        bit(CONNACK) | bit(PUBACK) | bit(PUBREC) | bit(PUBREL) | bit(PUBCOMP) | bit(SUBACK) | bit(UNSUBACK) | bit(DISCONNECT) | bit(AUTH),
	PropReceiveMaximum:      bit(CONNECT) | bit(CONNACK),
	PropTopicAliasMaximum:   bit(CONNECT) | bit(CONNACK),
	PropTopicAlias:          bit(PUBLISH),
	PropMaximumQoS:          bit(CONNACK),
	PropRetainAvailable:     bit(CONNACK),
	PropUser:                0xffff | bit(willPlace),
	PropMaximumPacketSize:   bit(CONNECT) | bit(CONNACK),
	PropWildcardAvailable:   bit(CONNACK),
	PropSubIDAvailable:      bit(CONNACK),
	PropSharedAvailable:     bit(CONNACK),
}

func bit(place byte) uint32 { return 1 << place }

// decodeProperties reads a property list of a packet (place: its type,
// or willPlace).
func (d *decoder) properties(place byte) (Properties, error) {
	var p Properties
	n, err := d.varint()
	if err != nil {
		return p, err
	}
	if n > len(d.b) {
		return p, malformed("properties of %d bytes in %d", n, len(d.b))
	}
	pd := &decoder{b: d.b[:n]}
	d.b = d.b[n:]
	for len(pd.b) > 0 {
		idv, err := pd.varint()
		if err != nil {
			return p, err
		}
		places, known := propertyPlaces[byte(idv)]
		if idv > 0x7f || !known {
			return p, malformed("property 0x%x", idv)
		}
		id := byte(idv)
		if places&bit(place) == 0 {
			return p, protocolError("property 0x%02x in a %s", id, placeName(place))
		}
		if p.Has(id) && id != PropUser && id != PropSubscriptionID {
			return p, protocolError("property 0x%02x twice", id)
		}
		p.Set(id)
		if err := pd.property(&p, id); err != nil {
			return p, err
		}
	}
	return p, nil
}

func placeName(place byte) string {
	if place == willPlace {
		return "will"
	}
	return TypeName(place)
}

// property reads one property's value.
func (d *decoder) property(p *Properties, id byte) (err error) {
	flag := func(v *byte) error {
		b, err := d.byte()
		if err == nil && b > 1 {
			return protocolError("property 0x%02x is %d", id, b)
		}
		*v = b
		return err
	}
	switch id {
	case PropPayloadFormat:
		err = flag(&p.PayloadFormat)
	case PropMessageExpiry:
		p.MessageExpiry, err = d.uint32()
	case PropContentType:
		p.ContentType, err = d.string()
	case PropResponseTopic:
		p.ResponseTopic, err = d.string()
	case PropCorrelationData:
		p.CorrelationData, err = d.binary()
	case PropSubscriptionID:
		var v int
		if v, err = d.varint(); err == nil && v == 0 {
			err = protocolError("subscription identifier 0")
		}
		p.SubscriptionIDs = append(p.SubscriptionIDs, v)
	case PropSessionExpiry:
		p.SessionExpiry, err = d.uint32()
	case PropAssignedClientID:
		p.AssignedClientID, err = d.string()
	case PropServerKeepAlive:
		p.ServerKeepAlive, err = d.uint16()
	case PropAuthMethod:
		p.AuthMethod, err = d.string()
	case PropAuthData:
		p.AuthData, err = d.binary()
	case PropRequestProblemInfo:
		err = flag(&p.RequestProblemInfo)
	case PropWillDelay:
		p.WillDelay, err = d.uint32()
	case PropRequestResponseInfo:
		err = flag(&p.RequestResponseInfo)
	case PropResponseInfo:
		p.ResponseInfo, err = d.string()
	case PropServerReference:
		p.ServerReference, err = d.string()
	case PropReasonString:
		p.ReasonString, err = d.string()
	case PropReceiveMaximum:
		if p.ReceiveMaximum, err = d.uint16(); err == nil && p.ReceiveMaximum == 0 {
			err = protocolError("receive maximum 0")
		}
	case PropTopicAliasMaximum:
		p.TopicAliasMaximum, err = d.uint16()
	case PropTopicAlias:
		p.TopicAlias, err = d.uint16()
	case PropMaximumQoS:
		err = flag(&p.MaximumQoS)
	case PropRetainAvailable:
		err = flag(&p.RetainAvailable)
	case PropUser:
		var u UserProperty
		if u.Key, err = d.string(); err == nil {
			u.Value, err = d.string()
		}
		p.User = append(p.User, u)
	case PropMaximumPacketSize:
		if p.MaximumPacketSize, err = d.uint32(); err == nil && p.MaximumPacketSize == 0 {
			err = protocolError("maximum packet size 0")
		}
	case PropWildcardAvailable:
		err = flag(&p.WildcardAvailable)
	case PropSubIDAvailable:
		err = flag(&p.SubIDAvailable)
	case PropSharedAvailable:
		err = flag(&p.SharedAvailable)
	}
	return err
}

// appendProperties appends the property list (its length first).
func appendProperties(dst []byte, p *Properties) []byte {
	size := p.size()
	dst = appendVarint(dst, size)
	if size == 0 {
		return dst
	}
	u8 := func(id, v byte) {
		if p.Has(id) {
			dst = append(dst, id, v)
		}
	}
	u16 := func(id byte, v uint16) {
		if p.Has(id) {
			dst = appendUint16(append(dst, id), v)
		}
	}
	u32 := func(id byte, v uint32) {
		if p.Has(id) {
			dst = appendUint32(append(dst, id), v)
		}
	}
	str := func(id byte, v string) {
		if p.Has(id) {
			dst = appendString(append(dst, id), v)
		}
	}
	bin := func(id byte, v []byte) {
		if p.Has(id) {
			dst = appendBinary(append(dst, id), v)
		}
	}
	u8(PropPayloadFormat, p.PayloadFormat)
	u32(PropMessageExpiry, p.MessageExpiry)
	str(PropContentType, p.ContentType)
	str(PropResponseTopic, p.ResponseTopic)
	bin(PropCorrelationData, p.CorrelationData)
	for _, id := range p.SubscriptionIDs {
		dst = appendVarint(append(dst, PropSubscriptionID), id)
	}
	u32(PropSessionExpiry, p.SessionExpiry)
	str(PropAssignedClientID, p.AssignedClientID)
	u16(PropServerKeepAlive, p.ServerKeepAlive)
	str(PropAuthMethod, p.AuthMethod)
	bin(PropAuthData, p.AuthData)
	u8(PropRequestProblemInfo, p.RequestProblemInfo)
	u32(PropWillDelay, p.WillDelay)
	u8(PropRequestResponseInfo, p.RequestResponseInfo)
	str(PropResponseInfo, p.ResponseInfo)
	str(PropServerReference, p.ServerReference)
	str(PropReasonString, p.ReasonString)
	u16(PropReceiveMaximum, p.ReceiveMaximum)
	u16(PropTopicAliasMaximum, p.TopicAliasMaximum)
	u16(PropTopicAlias, p.TopicAlias)
	u8(PropMaximumQoS, p.MaximumQoS)
	u8(PropRetainAvailable, p.RetainAvailable)
	for _, u := range p.User {
		dst = appendString(appendString(append(dst, PropUser), u.Key), u.Value)
	}
	u32(PropMaximumPacketSize, p.MaximumPacketSize)
	u8(PropWildcardAvailable, p.WildcardAvailable)
	u8(PropSubIDAvailable, p.SubIDAvailable)
	u8(PropSharedAvailable, p.SharedAvailable)
	return dst
}

// size is the encoded property list's size (without its length).
func (p *Properties) size() int {
	n := 0
	add := func(id byte, size int) {
		if p.Has(id) {
			n += 1 + size
		}
	}
	add(PropPayloadFormat, 1)
	add(PropMessageExpiry, 4)
	add(PropContentType, 2+len(p.ContentType))
	add(PropResponseTopic, 2+len(p.ResponseTopic))
	add(PropCorrelationData, 2+len(p.CorrelationData))
	for _, id := range p.SubscriptionIDs {
		n += 1 + varintSize(id)
	}
	add(PropSessionExpiry, 4)
	add(PropAssignedClientID, 2+len(p.AssignedClientID))
	add(PropServerKeepAlive, 2)
	add(PropAuthMethod, 2+len(p.AuthMethod))
	add(PropAuthData, 2+len(p.AuthData))
	add(PropRequestProblemInfo, 1)
	add(PropWillDelay, 4)
	add(PropRequestResponseInfo, 1)
	add(PropResponseInfo, 2+len(p.ResponseInfo))
	add(PropServerReference, 2+len(p.ServerReference))
	add(PropReasonString, 2+len(p.ReasonString))
	add(PropReceiveMaximum, 2)
	add(PropTopicAliasMaximum, 2)
	add(PropTopicAlias, 2)
	add(PropMaximumQoS, 1)
	add(PropRetainAvailable, 1)
	for _, u := range p.User {
		n += 1 + 4 + len(u.Key) + len(u.Value)
	}
	add(PropMaximumPacketSize, 4)
	add(PropWildcardAvailable, 1)
	add(PropSubIDAvailable, 1)
	add(PropSharedAvailable, 1)
	return n
}
