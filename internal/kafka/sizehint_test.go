package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A fetch response fits the buffer its size hint allocates, at every
// version, so it is encoded without growing it.
func TestFetchResponseFitsItsSizeHint(t *testing.T) {
	for v := int16(4); v <= 16; v++ {
		resp := kmsg.NewPtrFetchResponse()
		resp.SetVersion(v)
		for ti := range 3 {
			tr := kmsg.NewFetchResponseTopic()
			tr.Topic = "topic-with-a-rather-long-name-" + string(rune('a'+ti))
			for p := range 20 {
				pr := kmsg.NewFetchResponseTopicPartition()
				pr.Partition = int32(p)
				pr.RecordBatches = make([]byte, 100*p)
				for range p % 3 {
					pr.AbortedTransactions = append(pr.AbortedTransactions, kmsg.NewFetchResponseTopicPartitionAbortedTransaction())
				}
				tr.Partitions = append(tr.Partitions, pr)
			}
			resp.Topics = append(resp.Topics, tr)
		}
		hint := responseSizeHint(resp)
		buf := make([]byte, 0, hint)
		out := encodeResponse(buf, requestHeader{Key: 1, Version: v}, resp)
		if len(out) > hint {
			t.Fatalf("v%d: encoded %d bytes, hint %d", v, len(out), hint)
		}
	}
	if n := responseSizeHint(kmsg.NewPtrProduceResponse()); n != 0 {
		t.Fatalf("produce response hint %d, want 0", n)
	}
}
