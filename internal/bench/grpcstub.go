package bench

import (
	"context"
	"fmt"
	"hash/crc32"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// GRPCStubOptions describe the control server: a RocketMQ 5 gRPC service
// that stores nothing and answers every call at once, so that what the
// v5 client's calls cost a grpc-go server can be told apart from what a
// broker adds to them.
type GRPCStubOptions struct {
	Size int // bytes per message body handed out
	// Tuned serves with the broker's grpc-go server options (a pool of
	// call goroutines); otherwise grpc-go's defaults.
	Tuned bool
}

// GRPCStubServe answers the v5 client's route, heartbeat, telemetry,
// send, receive and ack calls on l from memory until ctx ends: receives
// are always answered with as many messages as asked for, acks and sends
// with OK.
func GRPCStubServe(ctx context.Context, l net.Listener, o GRPCStubOptions) error {
	var opts []grpc.ServerOption
	if o.Tuned {
		opts = append(opts, grpc.NumStreamWorkers(uint32(max(128, 16*runtime.GOMAXPROCS(0)))))
	}
	gs := grpc.NewServer(opts...)
	body := make([]byte, o.Size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	host, port, _ := net.SplitHostPort(l.Addr().String())
	p, _ := strconv.Atoi(port)
	v2.RegisterMessagingServiceServer(gs, &stubService{body: body,
		crc:       strings.ToUpper(strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 16)),
		endpoints: &v2.Endpoints{Scheme: v2.AddressScheme_IPv4, Addresses: []*v2.Address{{Host: host, Port: int32(p)}}}})
	stop := context.AfterFunc(ctx, gs.Stop)
	defer stop()
	err := gs.Serve(l)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

type stubService struct {
	v2.UnimplementedMessagingServiceServer
	body      []byte
	crc       string
	endpoints *v2.Endpoints
	next      atomic.Int64
}

func stubOK() *v2.Status { return &v2.Status{Code: v2.Code_OK, Message: "OK"} }

func (s *stubService) queues(topic *v2.Resource) []*v2.MessageQueue {
	b := &v2.Broker{Name: "stub", Endpoints: s.endpoints}
	out := make([]*v2.MessageQueue, 8)
	for i := range out {
		out[i] = &v2.MessageQueue{Topic: topic, Id: int32(i), Permission: v2.Permission_READ_WRITE, Broker: b,
			AcceptMessageTypes: []v2.MessageType{v2.MessageType_NORMAL}}
	}
	return out
}

func (s *stubService) QueryRoute(_ context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	return &v2.QueryRouteResponse{Status: stubOK(), MessageQueues: s.queues(req.GetTopic())}, nil
}

func (s *stubService) QueryAssignment(_ context.Context, req *v2.QueryAssignmentRequest) (*v2.QueryAssignmentResponse, error) {
	q := s.queues(req.GetTopic())[0]
	q.Id = -1
	return &v2.QueryAssignmentResponse{Status: stubOK(), Assignments: []*v2.Assignment{{MessageQueue: q}}}, nil
}

func (s *stubService) Heartbeat(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	return &v2.HeartbeatResponse{Status: stubOK()}, nil
}

func (s *stubService) NotifyClientTermination(context.Context, *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	return &v2.NotifyClientTerminationResponse{Status: stubOK()}, nil
}

func (s *stubService) Telemetry(stream v2.MessagingService_TelemetryServer) error {
	for {
		cmd, err := stream.Recv()
		if err != nil {
			return nil
		}
		in := cmd.GetSettings()
		if in == nil {
			continue
		}
		st := &v2.Settings{ClientType: in.ClientType, AccessPoint: in.AccessPoint, RequestTimeout: in.RequestTimeout,
			Metric: &v2.Metric{On: false}, BackoffPolicy: &v2.RetryPolicy{MaxAttempts: 3,
				Strategy: &v2.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &v2.ExponentialBackoff{
					Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2}}}}
		switch ps := in.GetPubSub().(type) {
		case *v2.Settings_Publishing:
			st.PubSub = &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: ps.Publishing.GetTopics(), MaxBodySize: 4 << 20}}
		case *v2.Settings_Subscription:
			fifo, batch := false, int32(32)
			st.PubSub = &v2.Settings_Subscription{Subscription: &v2.Subscription{Group: ps.Subscription.GetGroup(),
				Subscriptions: ps.Subscription.GetSubscriptions(), Fifo: &fifo, ReceiveBatchSize: &batch,
				LongPollingTimeout: durationpb.New(20 * time.Second)}}
		}
		if err := stream.Send(&v2.TelemetryCommand{Status: stubOK(), Command: &v2.TelemetryCommand_Settings{Settings: st}}); err != nil {
			return nil
		}
	}
}

func (s *stubService) SendMessage(_ context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	out := &v2.SendMessageResponse{Status: stubOK()}
	for _, m := range req.GetMessages() {
		out.Entries = append(out.Entries, &v2.SendResultEntry{Status: stubOK(), MessageId: m.GetSystemProperties().GetMessageId(),
			Offset: s.next.Add(1)})
	}
	return out, nil
}

func (s *stubService) ReceiveMessage(req *v2.ReceiveMessageRequest, stream v2.MessagingService_ReceiveMessageServer) error {
	if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: stubOK()}}); err != nil {
		return err
	}
	now := timestamppb.Now()
	for range max(req.GetBatchSize(), 1) {
		off := s.next.Add(1)
		id := fmt.Sprintf("STUB%028X", off)
		handle := "stub-" + strconv.FormatInt(off, 10)
		attempt := int32(1)
		m := &v2.Message{Topic: req.GetMessageQueue().GetTopic(), Body: s.body, UserProperties: map[string]string{},
			SystemProperties: &v2.SystemProperties{MessageId: id, BodyEncoding: v2.Encoding_IDENTITY, MessageType: v2.MessageType_NORMAL,
				BodyDigest: &v2.Digest{Type: v2.DigestType_CRC32, Checksum: s.crc}, BornTimestamp: now, StoreTimestamp: now,
				BornHost: "127.0.0.1", QueueOffset: &off, ReceiptHandle: &handle, DeliveryAttempt: &attempt,
				InvisibleDuration: req.GetInvisibleDuration()}}
		if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: m}}); err != nil {
			return err
		}
	}
	return nil
}

func (s *stubService) AckMessage(_ context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	out := &v2.AckMessageResponse{Status: stubOK()}
	for _, e := range req.GetEntries() {
		out.Entries = append(out.Entries, &v2.AckMessageResultEntry{MessageId: e.GetMessageId(), ReceiptHandle: e.GetReceiptHandle(), Status: stubOK()})
	}
	return out, nil
}
