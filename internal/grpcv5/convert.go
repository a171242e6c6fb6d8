package grpcv5

// Stored messages as gRPC clients read them (receive, transaction
// recovery): system properties from the message's own fields and headers
// (UNIQ_KEY → message_id, __SHARDINGKEY → message_group, TIMER_* → the
// delivery time), the rest of the headers as user properties, a body
// compressed by a remoting producer inflated, a CRC32 digest.

import (
	"hash/crc32"
	"strconv"
	"strings"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/model"
)

// storedMeta is where a message is stored.
type storedMeta struct {
	queueID   int32
	offset    model.QueueOffset
	storeTime int64
	storeHost string
}

// toProto lays out a stored message for a gRPC client.
func toProto(m *model.Message, topic *v2.Resource, at storedMeta) *v2.Message {
	body, err := broker.PlainBody(m)
	if err != nil {
		body = m.Body
	}
	sp := &v2.SystemProperties{BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL,
		BornHost: m.BornHost, StoreHost: at.storeHost, QueueId: at.queueID,
		BodyDigest: &v2.Digest{Type: v2.DigestType_CRC32, Checksum: strings.ToUpper(strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 16))}}
	if m.BornTime > 0 {
		sp.BornTimestamp = timestamppb.New(time.UnixMilli(m.BornTime))
	}
	if at.storeTime > 0 {
		sp.StoreTimestamp = timestamppb.New(time.UnixMilli(at.storeTime))
	}
	off := int64(at.offset)
	sp.QueueOffset = &off
	if m.Tags != "" {
		tag := m.Tags
		sp.Tag = &tag
	}
	if len(m.Key) > 0 {
		sp.Keys = strings.Fields(string(m.Key))
	}
	user := map[string]string{}
	for _, h := range m.Headers {
		v := string(h.Value)
		switch h.Key {
		case propUniqKey:
			sp.MessageId = v
		case propShardingKey:
			g := v
			sp.MessageGroup = &g
			sp.MessageType = v2.MessageType_FIFO
		case propTraceContext:
			tc := v
			sp.TraceContext = &tc
		case broker.HeaderTimerDeliverMs:
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				sp.DeliveryTimestamp = timestamppb.New(time.UnixMilli(ms))
				sp.MessageType = v2.MessageType_DELAY
			}
		case broker.HeaderTransactionPrepared:
			sp.MessageType = v2.MessageType_TRANSACTION
		case broker.HeaderDelayLevel, broker.HeaderTimerDelaySec, broker.HeaderTimerDelayMs:
			sp.MessageType = v2.MessageType_DELAY
		}
		if !systemProperties[h.Key] && !strings.HasPrefix(h.Key, "__ROSETTA") {
			user[h.Key] = v
		}
	}
	if sp.MessageId == "" {
		// Not sent by a RocketMQ client: named by its place.
		sp.MessageId = "R" + strconv.FormatInt(int64(at.queueID), 10) + "-" + strconv.FormatInt(off, 10)
	}
	return &v2.Message{Topic: topic, UserProperties: user, SystemProperties: sp, Body: body}
}
