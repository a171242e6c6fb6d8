package kafka

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/route"
)

// TestPartitionsOverGroups: a member of a cluster of two replication groups
// that leads group 0 creates Kafka topics counting partitions over both
// groups, names each partition's group leader in Metadata, serves the
// partitions of its group and answers NOT_LEADER_OR_FOLLOWER with the
// leader (KIP-951) for the others, and finds each key's coordinator on the
// leader of the group the key hashes to.
func TestPartitionsOverGroups(t *testing.T) {
	view := &ClusterView{Hosts: map[int32]string{1: "127.0.0.1", 2: "127.0.0.2"}, Groups: []GroupView{
		{Leader: 1, Epoch: 0, Replicas: []int32{1, 2}, ISR: []int32{1, 2}},
		{Leader: 2, Epoch: 3, Replicas: []int32{2, 1}, ISR: []int32{2, 1}},
	}}
	s := NewServer(Options{NodeID: 1, Groups: 2, Cluster: func() *ClusterView { return view }})
	be := testBackend(t, broker.Options{DefaultQueues: 2, MaxQueuesPerTopic: 16, Placement: route.Placement{Group: 0, Groups: 2}})
	s.Attach(0, be)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := newConn(s, a, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.ctx, c.cancel = ctx, cancel
	call := func(req kmsg.Request) kmsg.Response {
		t.Helper()
		r := c.dispatch(&request{hdr: requestHeader{Key: req.Key(), Version: req.GetVersion(), ClientID: "t"}, body: req.AppendTo(nil)})
		if r.await != nil {
			r.await()
		}
		return r.resp
	}

	create := kmsg.NewPtrCreateTopicsRequest()
	create.SetVersion(5)
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "orders", 4, -1
	create.Topics = append(create.Topics, ct)
	if r := call(create).(*kmsg.CreateTopicsResponse); r.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v", kerr.ErrorForCode(r.Topics[0].ErrorCode))
	}
	name, _ := s.topicName(defaultHome, "orders")
	topic, err := be.Broker.Topic(name)
	if err != nil || len(topic.All) != 4 || len(topic.Queues) != 2 {
		t.Fatalf("topic of 4 partitions over 2 groups: %v, %d in all, %d here", err, len(topic.All), len(topic.Queues))
	}

	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(12)
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	meta.Topics = append(meta.Topics, mt)
	mr := call(meta).(*kmsg.MetadataResponse)
	if len(mr.Brokers) != 2 || len(mr.Topics) != 1 || len(mr.Topics[0].Partitions) != 4 {
		t.Fatalf("metadata: %d brokers, topics %+v", len(mr.Brokers), mr.Topics)
	}
	for _, p := range mr.Topics[0].Partitions {
		want := view.Groups[p.Partition%2]
		if p.Leader != want.Leader || p.Replicas[0] != want.Replicas[0] || (p.Partition%2 == 1 && p.LeaderEpoch != 3) {
			t.Fatalf("partition %d: leader %d epoch %d replicas %v", p.Partition, p.Leader, p.LeaderEpoch, p.Replicas)
		}
	}

	produce := kmsg.NewPtrProduceRequest()
	produce.SetVersion(10)
	produce.Acks, produce.TimeoutMillis = -1, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = "orders"
	for p := int32(0); p < 4; p++ {
		pp := kmsg.NewProduceRequestTopicPartition()
		pp.Partition = p
		pp.Records = testBatch(t, "v")
		pt.Partitions = append(pt.Partitions, pp)
	}
	produce.Topics = append(produce.Topics, pt)
	for _, p := range call(produce).(*kmsg.ProduceResponse).Topics[0].Partitions {
		switch {
		case p.Partition%2 == 0 && (p.ErrorCode != 0 || p.BaseOffset != 0):
			t.Fatalf("partition %d of the group led here: %v at %d", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		case p.Partition%2 == 1 && (p.ErrorCode != kerr.NotLeaderForPartition.Code || p.CurrentLeader.LeaderID != 2 || p.CurrentLeader.LeaderEpoch != 3):
			t.Fatalf("partition %d of the other group: %v, current leader %+v", p.Partition, kerr.ErrorForCode(p.ErrorCode), p.CurrentLeader)
		}
	}

	// Keys of either group: the coordinator is the group's leader.
	for _, key := range []string{"a", "b", "c", "d"} {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.SetVersion(4)
		fc.CoordinatorKeys = []string{key}
		got := call(fc).(*kmsg.FindCoordinatorResponse).Coordinators[0]
		want := view.Groups[broker.KeyPartition(key, 2)].Leader
		if got.ErrorCode != 0 || got.NodeID != want {
			t.Fatalf("coordinator of %q: node %d (%v), want %d", key, got.NodeID, kerr.ErrorForCode(got.ErrorCode), want)
		}
		hb := kmsg.NewPtrHeartbeatRequest()
		hb.SetVersion(4)
		hb.Group, hb.MemberID, hb.Generation = key, "m", 1
		code := call(hb).(*kmsg.HeartbeatResponse).ErrorCode
		if want == 2 && code != kerr.NotCoordinator.Code || want == 1 && code == kerr.NotCoordinator.Code {
			t.Fatalf("heartbeat of %q coordinated by node %d: %v", key, want, kerr.ErrorForCode(code))
		}
	}
}

// TestPartitionNotYetInGroup: a partition the catalog knows but its
// group's broker does not yet (a new term's metadata catching up) answers
// the retriable NOT_LEADER_OR_FOLLOWER, never UNKNOWN_TOPIC_OR_PARTITION,
// on which clients give up after a few tries.
func TestPartitionNotYetInGroup(t *testing.T) {
	view := &ClusterView{Hosts: map[int32]string{1: "127.0.0.1"}, Groups: []GroupView{
		{Leader: 1, Replicas: []int32{1}, ISR: []int32{1}}, {Leader: 1, Replicas: []int32{1}, ISR: []int32{1}},
	}}
	s := NewServer(Options{NodeID: 1, Groups: 2, Cluster: func() *ClusterView { return view }})
	// Each broker over its own metadata: group 1's never sees the topic
	// group 0's creates.
	s.Attach(0, testBackend(t, broker.Options{DefaultQueues: 2, MaxQueuesPerTopic: 16, Placement: route.Placement{Group: 0, Groups: 2}}))
	s.Attach(1, testBackend(t, broker.Options{DefaultQueues: 2, MaxQueuesPerTopic: 16, Placement: route.Placement{Group: 1, Groups: 2}}))
	name, _ := s.topicName(defaultHome, "late")
	if _, err := s.cat().CreateTopic(t.Context(), name, 2, broker.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	topic, err := s.cat().Topic(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.partition(topic, 0); err != nil {
		t.Fatalf("partition 0, in group 0: %v", err)
	}
	_, err = s.partition(topic, 1)
	if code := errorCode(err); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("partition 1, unknown to group 1's broker: %v (%v)", kerr.ErrorForCode(code), err)
	}
}

// testBatch is a v2 record batch of one record with value v.
func testBatch(t *testing.T, v string) []byte {
	t.Helper()
	rec := kmsg.NewRecord()
	rec.Value = []byte(v)
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	records := rec.AppendTo(nil)
	b := kmsg.NewRecordBatch()
	b.Magic, b.ProducerID, b.ProducerEpoch, b.FirstSequence = 2, -1, -1, -1
	b.NumRecords, b.Records = 1, records
	b.FirstTimestamp, b.MaxTimestamp = time.Now().UnixMilli(), time.Now().UnixMilli()
	raw := b.AppendTo(nil)
	b.Length = int32(len(raw) - 12)
	raw = b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestReplicationFactorRefusedAboveCopies: a cluster of one member refuses
// a topic asked with three copies (more than its members) and one asked
// with two (an even factor); one and the default -1 are accepted and
// answered 1. A single node accepts any factor (tools hard-code 3).
func TestReplicationFactorRefusedAboveCopies(t *testing.T) {
	for _, cluster := range []bool{true, false} {
		opts := Options{NodeID: 1}
		if cluster {
			view := &ClusterView{Hosts: map[int32]string{1: "127.0.0.1"}, Groups: []GroupView{{Leader: 1, Replicas: []int32{1}, ISR: []int32{1}}}}
			opts.Cluster = func() *ClusterView { return view }
		}
		s := NewServer(opts)
		s.Attach(0, testBackend(t, broker.Options{DefaultQueues: 2, MaxQueuesPerTopic: 16}))
		a, b := net.Pipe()
		c := newConn(s, a, Listener{Name: ProtocolPlaintext, Protocol: ProtocolPlaintext})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.ctx, c.cancel = ctx, cancel
		for i, rf := range []int16{3, 2, 1, -1} {
			create := kmsg.NewPtrCreateTopicsRequest()
			create.SetVersion(5)
			ct := kmsg.NewCreateTopicsRequestTopic()
			ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "rf"+strconv.Itoa(i), 2, rf
			create.Topics = append(create.Topics, ct)
			r := c.dispatch(&request{hdr: requestHeader{Key: create.Key(), Version: 5, ClientID: "t"}, body: create.AppendTo(nil)})
			got := r.resp.(*kmsg.CreateTopicsResponse).Topics[0]
			refused := cluster && (rf == 3 || rf == 2)
			switch {
			case refused && got.ErrorCode != kerr.InvalidReplicationFactor.Code:
				t.Errorf("cluster of one copy, factor 3: %v", kerr.ErrorForCode(got.ErrorCode))
			case !refused && (got.ErrorCode != 0 || got.ReplicationFactor != 1):
				t.Errorf("cluster %v, factor %d: %v, answered factor %d", cluster, rf, kerr.ErrorForCode(got.ErrorCode), got.ReplicationFactor)
			}
		}
		cancel()
		a.Close()
		b.Close()
	}
}
