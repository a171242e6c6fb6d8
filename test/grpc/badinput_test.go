package grpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

// rawCodec sends bytes as they are (to send malformed protobuf).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestBadInputGetsCodes: malformed protobuf, unknown topics, forged
// receipt handles and transaction ids, oversize bodies and reserved
// properties get the proper apache.rocketmq.v2 codes, and the server keeps
// serving.
func TestBadInputGetsCodes(t *testing.T) {
	t.Parallel()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := v2.NewMessagingServiceClient(conn)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "bad-input"), 30*time.Second)
	defer cancel()
	topic := &v2.Resource{Name: "bad-input"}
	group := &v2.Resource{Name: "bad-group"}

	// Malformed protobuf.
	var out []byte
	garbage := []byte{0xff, 0xff, 0xff, 0x0f, 0x01}
	if err := conn.Invoke(ctx, "/apache.rocketmq.v2.MessagingService/SendMessage", &garbage, &out, grpc.ForceCodec(rawCodec{})); err == nil {
		t.Error("malformed SendMessage accepted")
	}

	check := func(what string, st *v2.Status, want v2.Code) {
		t.Helper()
		if st.GetCode() != want {
			t.Errorf("%s: %v (%s), want %v", what, st.GetCode(), st.GetMessage(), want)
		}
	}
	msg := func(id string, body []byte, props map[string]string) *v2.Message {
		return &v2.Message{Topic: topic, Body: body, UserProperties: props, SystemProperties: &v2.SystemProperties{MessageId: id}}
	}
	r, err := cl.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{msg("", []byte("x"), nil)}})
	if err != nil {
		t.Fatal(err)
	}
	check("no message id", r.GetStatus(), v2.Code_ILLEGAL_MESSAGE_ID)
	r, _ = cl.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{msg("id1", make([]byte, 4<<20+1024), nil)}})
	check("oversize body", r.GetStatus(), v2.Code_MESSAGE_BODY_TOO_LARGE)
	r, _ = cl.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{msg("id2", []byte("x"), map[string]string{"UNIQ_KEY": "x"})}})
	check("reserved property", r.GetStatus(), v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY)
	r, _ = cl.SendMessage(ctx, &v2.SendMessageRequest{})
	check("no messages", r.GetStatus(), v2.Code_BAD_REQUEST)

	ack, err := cl.AckMessage(ctx, &v2.AckMessageRequest{Group: group, Topic: topic,
		Entries: []*v2.AckMessageEntry{{MessageId: "x", ReceiptHandle: "forged"}, {MessageId: "y", ReceiptHandle: "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}})
	if err != nil {
		t.Fatal(err)
	}
	check("forged receipt handle", ack.GetStatus(), v2.Code_INVALID_RECEIPT_HANDLE)
	ch, _ := cl.ChangeInvisibleDuration(ctx, &v2.ChangeInvisibleDurationRequest{Group: group, Topic: topic, ReceiptHandle: "forged",
		InvisibleDuration: durationpb.New(time.Minute)})
	check("forged handle, change", ch.GetStatus(), v2.Code_INVALID_RECEIPT_HANDLE)
	end, _ := cl.EndTransaction(ctx, &v2.EndTransactionRequest{Topic: topic, TransactionId: "nope", Resolution: v2.TransactionResolution_COMMIT})
	check("forged transaction id", end.GetStatus(), v2.Code_INVALID_TRANSACTION_ID)
	end, _ = cl.EndTransaction(ctx, &v2.EndTransactionRequest{Topic: topic, TransactionId: "T999999", Resolution: v2.TransactionResolution_COMMIT})
	check("unknown transaction", end.GetStatus(), v2.Code_NOT_FOUND)
	rec, _ := cl.RecallMessage(ctx, &v2.RecallMessageRequest{Topic: topic, RecallHandle: "forged"})
	check("forged recall handle", rec.GetStatus(), v2.Code_BAD_REQUEST)

	stream, err := cl.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: group,
		MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: "no-such-topic"}, Id: -1}, BatchSize: 1,
		InvisibleDuration: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	check("receive from an unknown topic", first.GetStatus(), v2.Code_TOPIC_NOT_FOUND)
	stream, _ = cl.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: &v2.Resource{},
		MessageQueue: &v2.MessageQueue{Topic: topic, Id: -1}, InvisibleDuration: durationpb.New(time.Minute)})
	first, _ = stream.Recv()
	check("receive without a group", first.GetStatus(), v2.Code_ILLEGAL_CONSUMER_GROUP)

	// Still serving.
	route, err := cl.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: topic, Endpoints: &v2.Endpoints{
		Addresses: []*v2.Address{{Host: "127.0.0.1", Port: 1}}}})
	if err != nil || route.GetStatus().GetCode() != v2.Code_OK || len(route.GetMessageQueues()) == 0 {
		t.Fatalf("route after bad input: %v %v", route, err)
	}
	if !strings.Contains(route.GetMessageQueues()[0].GetBroker().GetName(), "rosetta") {
		t.Errorf("broker name %q", route.GetMessageQueues()[0].GetBroker().GetName())
	}
}
