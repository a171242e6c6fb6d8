package remoting

// Message query: VIEW_MESSAGE_BY_ID (33) reads the message an offset
// message id names (its position gives the queue and offset), and
// QUERY_MESSAGE (12) finds a topic's messages by key — any of its KEYS, or
// its UNIQ_KEY (the id clients show) when the request says
// _UNIQUE_KEY_QUERY — through the broker's key index, newest first, within
// the time range asked. Both answer in the stored-message layout;
// QUERY_NOT_FOUND when nothing matches.

import (
	"strconv"
	"strings"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

func handleViewMessageByID(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	pos, err := strconv.ParseInt(req.Ext("offset"), 10, 64)
	if err != nil {
		return protocol.NewResponse(req, protocol.InvalidParameter, "offset "+req.Ext("offset"))
	}
	f, err := s.messageAt(pos)
	if err != nil {
		return protocol.NewResponse(req, protocol.SystemError, "no message at offset "+req.Ext("offset")+": "+err.Error())
	}
	// The message's topic is known only now: reading it needs Read there.
	if refused := rc.conn.check(rc.principal, req, topicCheck(rmqName(f.topic.Name), security.OpRead)); refused != nil {
		return refused
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.Body = protocol.AppendStoredV1(nil, f.stored(rc.conn.store))
	return resp
}

func handleQueryMessage(rc *reqCtx, req *protocol.Command) *protocol.Command {
	s := rc.conn.s
	topic, key := req.Ext("topic"), req.Ext("key")
	maxNum, _ := strconv.Atoi(req.Ext("maxNum"))
	if maxNum <= 0 || maxNum > 64 {
		maxNum = 64
	}
	from, _ := strconv.ParseInt(req.Ext("beginTimestamp"), 10, 64)
	to, _ := strconv.ParseInt(req.Ext("endTimestamp"), 10, 64)
	unique := req.Ext("_UNIQUE_KEY_QUERY") == "true"
	store := rc.conn.store
	var body []byte
	var newest int64
	for _, h := range s.broker.LookupKey([]byte(key), maxNum*4, from, to) {
		f, err := s.messageAt(position(h.Queue, h.Offset))
		if err != nil || rmqName(f.topic.Name) != topic || !hasKey(f, key, unique) {
			continue // a hash collision, another topic, or gone
		}
		body = protocol.AppendStoredV1(body, f.stored(store))
		newest = max(newest, f.storeTime)
		if maxNum--; maxNum == 0 {
			break
		}
	}
	if body == nil {
		return protocol.NewResponse(req, protocol.QueryNotFound, "no message with key "+key+" in "+topic)
	}
	resp := protocol.NewResponse(req, protocol.Success, "")
	resp.SetExt("indexLastUpdateTimestamp", strconv.FormatInt(newest, 10))
	resp.SetExt("indexLastUpdatePhyoffset", "0")
	resp.Body = body
	return resp
}

// hasKey reports whether a found message carries key (as its UNIQ_KEY when
// unique is set, else among its KEYS).
func hasKey(f *found, key string, unique bool) bool {
	if unique {
		v, ok := f.msg.Header(propUniqKey)
		return ok && string(v) == key
	}
	for _, k := range strings.Fields(string(f.msg.Key)) {
		if k == key {
			return true
		}
	}
	return string(f.msg.Key) == key
}
