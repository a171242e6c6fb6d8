package mqtt

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/kbatch"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/mqtt/packet"
)

// MQTT topics and Rosetta topics. An MQTT topic name maps to the Rosetta
// topic named by its first Levels levels (joined with '.'), in the default
// tenant and namespace; a name whose levels make no valid topic name ($SYS,
// an empty first level, characters Kafka topics cannot hold) maps to the
// default topic. The queue is chosen by a hash of the whole MQTT name, so
// one MQTT topic's messages keep their order. Each publish is one record:
// the payload as its value, the MQTT topic name and the publish's
// attributes as headers (mqtt.topic and the others below), MQTT 5 user
// properties as headers of their own. A record another protocol wrote has
// no mqtt.topic header: its MQTT topic name is its topic's short name.

// Record headers a publish is stored with.
const (
	HeaderTopic           = "mqtt.topic"
	HeaderQoS             = "mqtt.qos"
	HeaderRetain          = "mqtt.retain"
	HeaderClient          = "mqtt.client"
	HeaderExpiry          = "mqtt.expiry_ms" // when the message expires (unix ms)
	HeaderContentType     = "mqtt.content_type"
	HeaderResponseTopic   = "mqtt.response_topic"
	HeaderCorrelationData = "mqtt.correlation_data"
	HeaderPayloadFormat   = "mqtt.payload_format"
)

// Mapping maps MQTT topic names to Rosetta topics.
type Mapping struct {
	// Levels is how many leading levels name the topic (0: every MQTT
	// topic is the default topic).
	Levels int
	// Default is the topic of names the levels make no topic of.
	Default model.TopicName
}

// TopicOf is the Rosetta topic an MQTT topic name is stored in.
func (m Mapping) TopicOf(name string) model.TopicName {
	if m.Levels <= 0 {
		return m.Default
	}
	levels := strings.SplitN(name, "/", m.Levels+1)
	if len(levels) > m.Levels {
		levels = levels[:m.Levels]
	}
	n, err := model.ParseTopicName(strings.Join(levels, "."))
	if err != nil || strings.HasPrefix(n.Topic, ".") || strings.HasSuffix(n.Topic, ".") || strings.Contains(n.Topic, "..") {
		return m.Default
	}
	return n
}

// TopicsOf is the Rosetta topic holding the names a filter matches, or
// all (any topic may) when a wildcard stands in its leading levels.
func (m Mapping) TopicsOf(filter string) (t model.TopicName, all bool) {
	if m.Levels <= 0 {
		return m.Default, false
	}
	levels := strings.SplitN(filter, "/", m.Levels+1)
	if len(levels) > m.Levels {
		levels = levels[:m.Levels]
	}
	for _, l := range levels {
		if l == "+" || l == "#" {
			return model.TopicName{}, true
		}
	}
	return m.TopicOf(filter), false
}

// queueFor picks the queue of an MQTT topic name among n.
func queueFor(name string, n int) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int32(h.Sum32() % uint32(max(n, 1)))
}

// publishRecord is a publish as the record stored for it.
func publishRecord(p *packet.Publish, client string, now int64) kbatch.NewRecord {
	r := kbatch.NewRecord{Timestamp: now, Value: p.Payload}
	if r.Value == nil {
		r.Value = []byte{}
	}
	h := make([]kbatch.RecordHeader, 0, 4+len(p.Props.User))
	h = append(h, kbatch.RecordHeader{Key: HeaderTopic, Value: []byte(p.Topic)},
		kbatch.RecordHeader{Key: HeaderQoS, Value: []byte{'0' + p.QoS}},
		kbatch.RecordHeader{Key: HeaderClient, Value: []byte(client)})
	if p.Retain {
		h = append(h, kbatch.RecordHeader{Key: HeaderRetain, Value: []byte{'1'}})
	}
	pr := &p.Props
	if pr.Has(packet.PropMessageExpiry) {
		h = append(h, kbatch.RecordHeader{Key: HeaderExpiry, Value: strconv.AppendInt(nil, now+int64(pr.MessageExpiry)*1000, 10)})
	}
	if pr.Has(packet.PropContentType) {
		h = append(h, kbatch.RecordHeader{Key: HeaderContentType, Value: []byte(pr.ContentType)})
	}
	if pr.Has(packet.PropResponseTopic) {
		h = append(h, kbatch.RecordHeader{Key: HeaderResponseTopic, Value: []byte(pr.ResponseTopic)})
	}
	if pr.Has(packet.PropCorrelationData) {
		h = append(h, kbatch.RecordHeader{Key: HeaderCorrelationData, Value: pr.CorrelationData})
	}
	if pr.Has(packet.PropPayloadFormat) {
		h = append(h, kbatch.RecordHeader{Key: HeaderPayloadFormat, Value: []byte{'0' + pr.PayloadFormat}})
	}
	for _, u := range pr.User {
		h = append(h, kbatch.RecordHeader{Key: u.Key, Value: []byte(u.Value)})
	}
	r.Headers = h
	return r
}

// message is a stored record as MQTT sees it.
type message struct {
	topic   string
	qos     byte // the publish's (1 for other protocols' records)
	retain  bool
	client  string
	expiry  int64 // unix ms, 0: none
	payload []byte
	props   packet.Properties // content type, response topic, correlation data, payload format, user properties
}

// messageOf reads a stored message; t is its topic (for records without
// an MQTT topic name). Byte fields alias m.
func messageOf(t model.TopicName, m *model.Message) message {
	msg := message{topic: t.Short(), qos: 1, payload: m.Body}
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderTopic:
			msg.topic = string(h.Value)
		case HeaderQoS:
			if len(h.Value) == 1 && h.Value[0] >= '0' && h.Value[0] <= '2' {
				msg.qos = h.Value[0] - '0'
			}
		case HeaderRetain:
			msg.retain = string(h.Value) == "1"
		case HeaderClient:
			msg.client = string(h.Value)
		case HeaderExpiry:
			msg.expiry, _ = strconv.ParseInt(string(h.Value), 10, 64)
		case HeaderContentType:
			msg.props.Set(packet.PropContentType)
			msg.props.ContentType = string(h.Value)
		case HeaderResponseTopic:
			msg.props.Set(packet.PropResponseTopic)
			msg.props.ResponseTopic = string(h.Value)
		case HeaderCorrelationData:
			msg.props.Set(packet.PropCorrelationData)
			msg.props.CorrelationData = h.Value
		case HeaderPayloadFormat:
			if string(h.Value) == "1" {
				msg.props.Set(packet.PropPayloadFormat)
				msg.props.PayloadFormat = 1
			}
		default:
			// (headers MQTT strings cannot carry are left out)
			if packet.ValidString([]byte(h.Key)) == nil && packet.ValidString(h.Value) == nil {
				msg.props.User = append(msg.props.User, packet.UserProperty{Key: h.Key, Value: string(h.Value)})
			}
		}
	}
	if m.Key != nil && msg.client == "" && packet.ValidString(m.Key) == nil {
		msg.props.User = append(msg.props.User, packet.UserProperty{Key: "key", Value: string(m.Key)})
	}
	if m.Tags != "" {
		msg.props.User = append(msg.props.User, packet.UserProperty{Key: "rocketmq.TAGS", Value: m.Tags})
	}
	return msg
}
