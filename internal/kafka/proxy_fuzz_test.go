package kafka

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// proxyOverServer is a Proxy whose one group is led by node 1, forwarding
// to srv as a member would answer.
func proxyOverServer(srv *Server) *Proxy {
	return NewProxy(ProxyOptions{
		NodeID:     21,
		Nodes:      func() map[int32]string { return map[int32]string{21: "127.0.0.21"} },
		Groups:     func() int { return 1 },
		MadeGroups: func() int { return 1 },
		Leader:     func(int) int32 { return 1 },
		Forward: func(ctx context.Context, _ int32, f Forwarded) (ForwardAnswer, error) {
			// Through the codec both ways, as over the transport.
			in, err := DecodeForwarded(AppendForwarded(nil, f))
			if err != nil {
				return ForwardAnswer{}, err
			}
			ans, err := srv.ServeForwarded(ctx, 21, in)
			if err != nil {
				return ans, err
			}
			return DecodeForwardAnswer(AppendForwardAnswer(nil, ans))
		},
	})
}

// FuzzProxy runs arbitrary request bodies of every API key and version
// through a protocol-only node's Kafka front-end and the member answering
// it: bad input never panics either.
func FuzzProxy(f *testing.F) {
	for _, h := range handlerTable() {
		req := kmsg.RequestForKey(h.key)
		req.SetVersion(h.max)
		f.Add(byte(h.key), byte(h.max), req.AppendTo(nil))
	}
	produce := kmsg.NewPtrProduceRequest()
	produce.SetVersion(9)
	produce.Acks = -1
	produce.Topics = []kmsg.ProduceRequestTopic{{Topic: "fuzz", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0}}}}
	f.Add(byte(0), byte(9), produce.AppendTo(nil))
	srv := fuzzServer(f)
	p := proxyOverServer(srv)
	f.Fuzz(func(t *testing.T, key, version byte, body []byte) {
		h := lookupHandler(int16(key))
		if h == nil {
			return
		}
		if key == 1 { // a fetch waits at most briefly
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(int16(version))
			if req.ReadFrom(body) == nil {
				req.MaxWaitMillis = min(req.MaxWaitMillis, 5)
				body = req.AppendTo(nil)
			}
		}
		client, server := net.Pipe()
		defer client.Close()
		defer server.Close()
		c := p.newConn(server)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		pd := &pending{hdr: requestHeader{Key: int16(key), Version: int16(version), ClientID: "fuzz"}, done: make(chan struct{})}
		if !c.start(ctx, pd, body) {
			return
		}
		select {
		case <-pd.done:
		case <-ctx.Done():
			t.Fatalf("key %d version %d: no answer", key, version)
		}
	})
}

// TestProxyProduceFetch: a record produced through a protocol-only node's
// front-end is fetched back through it, the partition led by the node in
// its metadata.
func TestProxyProduceFetch(t *testing.T) {
	srv := fuzzServer(t)
	p := proxyOverServer(srv)
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	c := p.newConn(server)
	ctx := context.Background()
	call := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		pd := &pending{hdr: requestHeader{Key: req.Key(), Version: req.GetVersion(), ClientID: "t"}, done: make(chan struct{})}
		if !c.start(ctx, pd, req.AppendTo(nil)) {
			t.Fatalf("%s refused", kmsg.NameForKey(req.Key()))
		}
		<-pd.done
		resp := req.ResponseKind()
		resp.SetVersion(req.GetVersion())
		if err := resp.ReadFrom(pd.resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	md := kmsg.NewPtrMetadataRequest()
	md.SetVersion(12)
	md.AllowAutoTopicCreation = true
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: kmsg.StringPtr("proxied")}}
	var mresp *kmsg.MetadataResponse
	for i := 0; i < 50; i++ {
		mresp = call(md).(*kmsg.MetadataResponse)
		if len(mresp.Topics) == 1 && mresp.Topics[0].ErrorCode == 0 && len(mresp.Topics[0].Partitions) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(mresp.Brokers) != 1 || mresp.Brokers[0].NodeID != 21*GroupSpan || mresp.Topics[0].Partitions[0].Leader != 21*GroupSpan {
		t.Fatalf("metadata through the proxy: brokers %+v, partitions %+v", mresp.Brokers, mresp.Topics[0].Partitions)
	}
	prod := kmsg.NewPtrProduceRequest()
	prod.SetVersion(9)
	prod.Acks = -1
	prod.TimeoutMillis = 5000
	prod.Topics = []kmsg.ProduceRequestTopic{{Topic: "proxied", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: testBatch(t, "hello")}}}}
	presp := call(prod).(*kmsg.ProduceResponse)
	if len(presp.Topics) != 1 || presp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("produce through the proxy: %+v", presp.Topics)
	}
	fetch := kmsg.NewPtrFetchRequest()
	fetch.SetVersion(16)
	fetch.MaxWaitMillis, fetch.MaxBytes, fetch.SessionEpoch = 100, 1<<20, -1
	fetch.Topics = []kmsg.FetchRequestTopic{{TopicID: mresp.Topics[0].TopicID, Partitions: []kmsg.FetchRequestTopicPartition{{Partition: 0, PartitionMaxBytes: 1 << 20, CurrentLeaderEpoch: -1, LastFetchedEpoch: -1}}}}
	fresp := call(fetch).(*kmsg.FetchResponse)
	if len(fresp.Topics) != 1 || fresp.Topics[0].Partitions[0].ErrorCode != 0 || len(fresp.Topics[0].Partitions[0].RecordBatches) == 0 || fresp.SessionID != 0 {
		t.Fatalf("fetch through the proxy: %+v", fresp)
	}
}
