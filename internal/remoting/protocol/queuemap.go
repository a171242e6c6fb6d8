package protocol

import "strconv"

// QueueEntry is one entry of a map keyed by message queue.
type QueueEntry struct {
	Topic      string
	BrokerName string
	QueueID    int32
	Value      []byte // the entry's JSON value
}

// AppendQueueMap appends a JSON-like object keyed by message queues in the
// form the Java broker's fastjson writes (and both the Java and Go clients
// read): each key is itself an object, fields in alphabetical order, e.g.
// {{"brokerName":"b","queueId":0,"topic":"t"}:5}. Bodies such as
// ResetOffsetBody, ConsumeStats and TopicStatsTable use it.
func AppendQueueMap(dst []byte, entries []QueueEntry) []byte {
	dst = append(dst, '{')
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"brokerName":`...)
		dst = appendJSONString(dst, e.BrokerName)
		dst = append(dst, `,"queueId":`...)
		dst = strconv.AppendInt(dst, int64(e.QueueID), 10)
		dst = append(dst, `,"topic":`...)
		dst = appendJSONString(dst, e.Topic)
		dst = append(dst, "}:"...)
		dst = append(dst, e.Value...)
	}
	return append(dst, '}')
}
