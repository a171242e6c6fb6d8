package kafka

// DescribeProducers (key 61), version 0.
//
// Version notes: lists the idempotent producers seen on each partition since
// start (or loaded from the log since), with their epoch, last sequence and
// the offset of their last batch; CurrentTxnStartOffset is the first offset
// of the producer's open transaction in the partition (-1 when none).

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeProducers(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeProducersRequest)
	resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
	s := rc.srv()
	for _, rt := range req.Topics {
		tr := kmsg.NewDescribeProducersResponseTopic()
		tr.Topic = rt.Topic
		t, nerr := rc.lookupTopic(rt.Topic)
		if !rc.allowedTopic(rt.Topic, security.OpRead) {
			nerr = errTopicAuthorization
		}
		for _, p := range rt.Partitions {
			pr := kmsg.NewDescribeProducersResponseTopicPartition()
			pr.Partition = p
			switch {
			case nerr != nil:
				pr.ErrorCode = errorCode(nerr)
			case p < 0 || int(p) >= len(t.All):
				pr.ErrorCode = errorCode(errUnknownPartition)
			default:
				pp, err := s.partition(t, p)
				if err != nil {
					pr.ErrorCode = errorCode(err)
					break
				}
				for pid, b := range pp.be.producers.Describe(pp.queue) {
					txnStart := int64(-1)
					if first, ok := pp.be.txnIndex.OpenFirst(pp.queue, pid); ok {
						txnStart = int64(first)
					}
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID = pid
					ap.ProducerEpoch = int32(b.Epoch)
					ap.LastSequence = b.LastSeq
					ap.LastTimestamp = -1
					ap.CoordinatorEpoch = -1
					ap.CurrentTxnStartOffset = txnStart
					pr.ActiveProducers = append(pr.ActiveProducers, ap)
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
