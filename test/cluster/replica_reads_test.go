package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkReplicaCopies: with Kafka's debugging replica id (-2), every member
// answers Fetch and ListOffsets for partitions it does not lead from its
// own copy, which holds, byte for byte, what the leader serves (the load
// has stopped, so the copies catch up). Partition p is led by member
// p mod 3 + 1.
func checkReplicaCopies(ctx context.Context, t *testing.T, cl *kgo.Client, topic string, partitions int32) {
	t.Helper()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		t.Fatalf("metadata of %s: %v %v", topic, err, td[topic].Err)
	}
	id := td[topic].ID
	for p := range partitions {
		leader := p%3 + 1
		want, err := fetchFrom(ctx, cl, leader, topic, id, p, -1)
		if err != nil {
			t.Fatalf("fetch partition %d from its leader %d: %v", p, leader, err)
		}
		if len(want.RecordBatches) == 0 {
			t.Fatalf("partition %d: its leader returned no records", p)
		}
		for m := int32(1); m <= 3; m++ {
			if m == leader {
				continue
			}
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				got, err := fetchFrom(ctx, cl, m, topic, id, p, -2)
				var why string
				switch {
				case err != nil:
					why = err.Error()
				case got.HighWatermark < want.HighWatermark:
					why = fmt.Sprintf("high watermark %d, leader's %d", got.HighWatermark, want.HighWatermark)
				case !bytes.Equal(got.RecordBatches, want.RecordBatches):
					why = fmt.Sprintf("%d bytes of batches differ from the leader's %d", len(got.RecordBatches), len(want.RecordBatches))
				}
				if why == "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("member %d's copy of partition %d, read as Kafka's debugging replica: %s", m, p, why)
				}
			}
			end, err := listEndFrom(ctx, cl, m, topic, p)
			if err != nil || end < want.HighWatermark {
				t.Fatalf("member %d's copy of partition %d: log end %d (%v), leader's high watermark %d", m, p, end, err, want.HighWatermark)
			}
			// A client's fetch (replica -1) is still sent to the leader.
			if _, err := fetchFrom(ctx, cl, m, topic, id, p, -1); err == nil {
				t.Fatalf("member %d answered a client's fetch of partition %d it does not lead", m, p)
			}
		}
	}
}

// fetchFrom fetches partition p of topic from offset 0 at member node as
// replica (-1: a client, -2: Kafka's debugging replica).
func fetchFrom(ctx context.Context, cl *kgo.Client, node int32, topic string, id [16]byte, p, replica int32) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = replica
	req.ReplicaState.ID = replica
	req.MaxBytes = 1 << 20
	req.MaxWaitMillis = 0
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = p
	rp.PartitionMaxBytes = 256 << 10
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, fmt.Errorf("fetch answered %d topics", len(resp.Topics))
	}
	pr := &resp.Topics[0].Partitions[0]
	if pr.ErrorCode != 0 {
		return nil, fmt.Errorf("fetch error code %d", pr.ErrorCode)
	}
	return pr, nil
}

// listEndFrom asks member node, as Kafka's debugging replica, for the
// log end offset of its copy of partition p.
func listEndFrom(ctx context.Context, cl *kgo.Client, node int32, topic string, p int32) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -2
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = p
	rp.Timestamp = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(node)))
	if err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("list offsets answered %d topics", len(resp.Topics))
	}
	pr := resp.Topics[0].Partitions[0]
	if pr.ErrorCode != 0 {
		return 0, fmt.Errorf("list offsets error code %d", pr.ErrorCode)
	}
	return pr.Offset, nil
}
