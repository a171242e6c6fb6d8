package model

// Header is one ordered key/value pair attached to a message. Values are bytes
// because Kafka headers are bytes; RocketMQ properties are UTF-8 strings.
type Header struct {
	Key   string
	Value []byte
}

// Message is the protocol-neutral view of one message. Front-ends translate
// their wire formats into it when a cross-protocol conversion is needed; the
// storage engine never sees it (it stores payloads in their native format).
type Message struct {
	Topic     TopicName
	Queue     int32
	Offset    QueueOffset
	Key       []byte
	Tags      string
	Headers   []Header
	Body      []byte
	BornTime  int64 // producer timestamp, ms since epoch
	StoreTime int64 // broker append time, ms since epoch
	Producer  string
	Flags     uint32 // system flags (RocketMQ sysFlag: FlagCompressedBody)

	// IndexKeys are further keys to find the message by (RocketMQ's
	// space-separated KEYS and its UNIQ_KEY); indexed, not stored.
	IndexKeys []string

	// RocketMQ attributes, kept so remoting consumers get back what was sent.
	UserFlag       int32  // the producer's int flag
	BornHost       string // host:port the producer sent from
	ReconsumeTimes int32
}

// FlagCompressedBody marks a body kept zlib-compressed as its producer sent
// it (RocketMQ sysFlag bit 0); readers of other protocols get it inflated.
const FlagCompressedBody = 1

// Header returns the value of the first header named key.
func (m *Message) Header(key string) ([]byte, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// Clone returns m with its own copies of every byte slice (a message read
// from the log aliases the log's mapped pages, valid only until released).
func (m Message) Clone() Message {
	m.Key = append([]byte(nil), m.Key...)
	m.Body = append([]byte(nil), m.Body...)
	if m.Headers != nil {
		hs := make([]Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = Header{Key: h.Key, Value: append([]byte(nil), h.Value...)}
		}
		m.Headers = hs
	}
	m.IndexKeys = append([]string(nil), m.IndexKeys...)
	return m
}
