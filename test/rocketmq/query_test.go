package rocketmq_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// call sends one request and reads its answer.
func call(t *testing.T, addr string, req *protocol.Command) *protocol.Command {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	req.Language, req.Version = "JAVA", 401
	if _, err := nc.Write(protocol.AppendFrame(nil, req)); err != nil {
		t.Fatal(err)
	}
	var n [4]byte
	if _, err := io.ReadFull(nc, n[:]); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(nc, frame); err != nil {
		t.Fatal(err)
	}
	resp, err := protocol.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestQueryByKeyAndID: admin-style lookups find a message by its offset
// message id, by any of its KEYS and by its UNIQ_KEY, and the client's own
// decoder reads the answers.
func TestQueryByKeyAndID(t *testing.T) {
	n := startNode(t)
	addr := n.RemotingAddr()
	p := startProducer(t, addr, "query-pg")
	m := primitive.NewMessage("queried", []byte("find me"))
	m.WithKeys([]string{"order-1", "order-2"})
	m.WithTag("T")
	res, err := p.SendSync(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(context.Background(), primitive.NewMessage("queried", []byte("other"))); err != nil {
		t.Fatal(err)
	}
	check := func(what string, resp *protocol.Command) {
		t.Helper()
		if resp.Code != protocol.Success {
			t.Fatalf("%s: code %d %s", what, resp.Code, resp.Remark)
		}
		msgs := primitive.DecodeMessage(resp.Body)
		if len(msgs) != 1 || string(msgs[0].Body) != "find me" || msgs[0].GetTags() != "T" || msgs[0].Topic != "queried" {
			t.Fatalf("%s: %+v", what, msgs)
		}
		if msgs[0].OffsetMsgId != res.OffsetMsgID {
			t.Fatalf("%s: offset msg id %s, sent %s", what, msgs[0].OffsetMsgId, res.OffsetMsgID)
		}
	}
	pos, err := protocol.ParseOffsetMessageID(res.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	check("view by id", call(t, addr, &protocol.Command{Code: protocol.ViewMessageByID,
		ExtFields: protocol.FieldsOf(map[string]string{"offset": strconv.FormatInt(pos, 10)})}))
	query := func(key string, unique bool) *protocol.Command {
		ext := map[string]string{"topic": "queried", "key": key, "maxNum": "32", "beginTimestamp": "0",
			"endTimestamp": strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)}
		if unique {
			ext["_UNIQUE_KEY_QUERY"] = "true"
		}
		return call(t, addr, &protocol.Command{Code: protocol.QueryMessage, ExtFields: protocol.FieldsOf(ext)})
	}
	check("query by key", query("order-2", false))
	check("query by unique key", query(res.MsgID, true))
	if r := query("no-such-key", false); r.Code != protocol.QueryNotFound {
		t.Fatalf("unknown key: code %d", r.Code)
	}
}
