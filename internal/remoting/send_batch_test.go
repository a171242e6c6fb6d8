package remoting

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rosettamq/rosetta/internal/remoting/protocol"
)

// Sends that arrive together on one connection are stored together, but
// each is answered on its own: a send to an unknown topic or an
// unsupported request among them fails alone, and every stored send gets
// its own offset.
func TestPipelinedSendsAnsweredEach(t *testing.T) {
	nc := dial(t, startServer(t))
	createTopic(t, nc, "batched", 2)
	send := func(opaque int32, topic string, queue int) *protocol.Command {
		return &protocol.Command{Code: protocol.SendMessage, Language: "GO", Version: 317, Opaque: opaque,
			ExtFields: protocol.Pairs("producerGroup", "p", "topic", topic, "queueId", strconv.Itoa(queue),
				"sysFlag", "0", "bornTimestamp", "1700000000000", "flag", "0",
				"properties", "UNIQ_KEY\x01id"+strconv.Itoa(int(opaque))+"\x02"),
			Body: []byte("body " + strconv.Itoa(int(opaque)))}
	}
	want := map[int32]int16{}
	var frames []byte
	for i := int32(1); i <= 100; i++ {
		cmd := send(i, "batched", int(i%2))
		switch {
		case i%17 == 0:
			cmd = send(i, "nosuch", 0)
			want[i] = protocol.TopicNotExist
		case i%29 == 0:
			cmd = &protocol.Command{Code: 4321, Opaque: i}
			want[i] = protocol.RequestCodeNotSupported
		default:
			want[i] = protocol.Success
		}
		frames = protocol.AppendFrame(frames, cmd)
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	offsets := map[string]bool{}
	var got []string
	for n := len(want); n > 0; n-- {
		r := readCommand(t, nc)
		code, ok := want[r.Opaque]
		if !ok {
			t.Fatalf("answer to %d: unknown or answered twice", r.Opaque)
		}
		delete(want, r.Opaque)
		if int16(r.Code) != code {
			t.Fatalf("answer to %d: code %d (%s), want %d", r.Opaque, r.Code, r.Remark, code)
		}
		if code != protocol.Success {
			continue
		}
		key := r.Ext("queueId") + "/" + r.Ext("queueOffset")
		if offsets[key] || r.Ext("msgId") == "" {
			t.Fatalf("answer to %d: offset %s given twice, or no message id: %+v", r.Opaque, key, r.ExtFields)
		}
		offsets[key] = true
		got = append(got, strconv.Itoa(int(r.Opaque))+"→"+key)
	}
	count := map[string]int{}
	for key := range offsets {
		count[strings.Split(key, "/")[0]]++
	}
	for q, n := range count {
		for o := 0; o < n; o++ {
			if !offsets[q+"/"+strconv.Itoa(o)] {
				t.Fatalf("queue %s: %d stored, offset %d not among them; answers %v", q, n, o, got)
			}
		}
	}
}

// A send gathered because another frame waited behind it is answered at
// once when that frame is not a send but a client's answer to a request
// of the broker's (handled on the spot): it does not wait for the
// connection's next request.
func TestGatheredSendAnsweredWhenAnAnswerFollows(t *testing.T) {
	nc := dial(t, startServer(t))
	createTopic(t, nc, "gathered", 1)
	send := &protocol.Command{Code: protocol.SendMessage, Language: "GO", Version: 317, Opaque: 7,
		ExtFields: protocol.Pairs("producerGroup", "p", "topic", "gathered", "queueId", "0", "sysFlag", "0",
			"bornTimestamp", "1700000000000", "flag", "0", "properties", "UNIQ_KEY\x01id7\x02"),
		Body: []byte("body")}
	answer := &protocol.Command{Code: protocol.Success, Opaque: 99, Flag: protocol.FlagResponse}
	if _, err := nc.Write(protocol.AppendFrame(protocol.AppendFrame(nil, send), answer)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if r := readCommand(t, nc); r.Opaque != 7 || r.Code != protocol.Success {
		t.Fatalf("answer %d %d %s", r.Opaque, r.Code, r.Remark)
	}
}
