package kafka_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// setGroupConfigs sets group configs (the GROUP resource) and fails the
// test on any error.
func setGroupConfigs(t *testing.T, ctx context.Context, cl *kgo.Client, group string, kvs ...string) {
	t.Helper()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, group
	for i := 0; i < len(kvs); i += 2 {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = kvs[i], kmsg.StringPtr(kvs[i+1]), kmsg.IncrementalAlterConfigOpSet
		r.Configs = append(r.Configs, c)
	}
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Resources) != 1 || resp.Resources[0].ErrorCode != 0 {
		t.Fatalf("set group %s configs %v: %v %+v", group, kvs, err, resp)
	}
}

// TestShareGroupThreeMembersOnePartition: three share consumers of one
// partition consume 100k records: each accepted exactly once, spread over
// the members; the group's start offset ends at the end; a classic group
// on the same topic still reads everything.
func TestShareGroupThreeMembersOnePartition(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, 3*time.Minute)
	const topic, group, total = "share-three", "share-three-g", 100_000
	admCl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(admCl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, ctx, admCl, group, "share.auto.offset.reset", "earliest")

	var mu sync.Mutex
	seen := make(map[int]int, total)
	perMember := make([]int, 3)
	var accepted atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		cl := newClient(t, n.KafkaAddr(), kgo.ShareGroup(group), kgo.ConsumeTopics(topic), kgo.FetchMaxWait(500*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					_ = cl.FlushAcks(context.Background())
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				fs := cl.PollFetches(pctx)
				cancel()
				for _, fe := range fs.Errors() {
					if fe.Err != context.DeadlineExceeded && fe.Err != context.Canceled {
						t.Errorf("member %d: %v", i, fe.Err)
					}
				}
				fs.EachRecord(func(r *kgo.Record) {
					k, _ := strconv.Atoi(string(r.Key))
					mu.Lock()
					seen[k]++
					perMember[i]++
					mu.Unlock()
					r.Ack(kgo.AckAccept)
					accepted.Add(1)
				})
				if err := cl.FlushAcks(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("member %d: flush acks: %v", i, err)
				}
			}
		}()
	}
	eventually(t, time.Minute, "three members assigned the partition", func() bool {
		d, err := adm.DescribeShareGroups(ctx, group)
		if err != nil {
			return false
		}
		g := d[group]
		if len(g.Members) != 3 {
			return false
		}
		for _, m := range g.Members {
			if len(m.Assignment) == 0 {
				return false
			}
		}
		return true
	})

	prod := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	for i := range total {
		prod.Produce(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "every record consumed", func() bool { return accepted.Load() >= total })
	close(done)
	wg.Wait()

	mu.Lock()
	for k := range total {
		if seen[k] != 1 {
			t.Errorf("record %d delivered %d times", k, seen[k])
			break
		}
	}
	t.Logf("records per member: %v", perMember)
	for i, c := range perMember {
		if c == 0 {
			t.Errorf("member %d got nothing: %v", i, perMember)
		}
	}
	mu.Unlock()

	eventually(t, 30*time.Second, "the start offset at the end", func() bool {
		got, err := adm.DescribeShareGroupOffsets(ctx, group)
		if err != nil {
			return false
		}
		o, ok := got[group].Offsets.Lookup(topic, 0)
		return ok && o.Err == nil && o.StartOffset == total && o.Lag == 0
	})

	// A classic group reads the same topic whole.
	classic := newClient(t, n.KafkaAddr(), kgo.ConsumerGroup("share-three-classic"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := 0
	for got < total {
		fs := classic.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("classic group read %d of %d", got, total)
		}
		got += fs.NumRecords()
	}
}

// shareMember is a raw share group member: its own connection, session
// epochs by hand.
type shareMember struct {
	t       *testing.T
	ctx     context.Context
	cl      *kgo.Client
	group   string
	id      string
	topicID [16]byte
	epoch   int32 // the share session's next epoch
}

func newShareMember(t *testing.T, ctx context.Context, addr, group, id, topic string) *shareMember {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	m := &shareMember{t: t, ctx: ctx, cl: cl, group: group, id: id}
	hb := kmsg.NewPtrShareGroupHeartbeatRequest()
	hb.GroupID, hb.MemberID, hb.MemberEpoch, hb.SubscribedTopicNames = group, id, 0, []string{topic}
	resp, err := hb.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("join %s: %v %+v", id, err, resp)
	}
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	md.Topics = append(md.Topics, mt)
	mresp, err := md.RequestWith(ctx, cl)
	if err != nil || len(mresp.Topics) != 1 {
		t.Fatalf("metadata: %v", err)
	}
	m.topicID = mresp.Topics[0].TopicID
	return m
}

// fetch sends a ShareFetch of partition 0 with acks; it returns the
// partition's answer.
func (m *shareMember) fetch(maxRecords int32, acks ...kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch) kmsg.ShareFetchResponseTopicPartition {
	m.t.Helper()
	req := kmsg.NewPtrShareFetchRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = m.epoch
	req.MaxWaitMillis, req.MaxBytes, req.MaxRecords, req.BatchSize = 500, 1<<20, maxRecords, maxRecords
	rt := kmsg.NewShareFetchRequestTopic()
	rt.TopicID = m.topicID
	rp := kmsg.NewShareFetchRequestTopicPartition()
	rp.PartitionMaxBytes = 1 << 20
	rp.AcknowledgementBatches = acks
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(m.ctx, m.cl)
	if err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		m.t.Fatalf("%s share fetch (epoch %d): %v %+v", m.id, m.epoch, err, resp)
	}
	m.epoch++
	p := resp.Topics[0].Partitions[0]
	if p.Records == nil {
		m.t.Fatalf("%s: null records", m.id)
	}
	return p
}

// ack sends a ShareAcknowledge of partition 0; it returns the partition's
// error code.
func (m *shareMember) ack(epoch int32, batches ...kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch) (top, part int16) {
	m.t.Helper()
	req := kmsg.NewPtrShareAcknowledgeRequest()
	req.GroupID, req.MemberID = &m.group, &m.id
	req.ShareSessionEpoch = epoch
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m.topicID
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.AcknowledgementBatches = batches
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(m.ctx, m.cl)
	if err != nil {
		m.t.Fatalf("%s share acknowledge: %v", m.id, err)
	}
	if resp.ErrorCode != 0 {
		return resp.ErrorCode, 0
	}
	if epoch > 0 {
		m.epoch++
	}
	return 0, resp.Topics[0].Partitions[0].ErrorCode
}

func ackBatch(first, last int64, typ int8) kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch {
	return kmsg.ShareAcknowledgeRequestTopicPartitionAcknowledgementBatch{FirstOffset: first, LastOffset: last, AcknowledgeTypes: []int8{typ}}
}

// acquired lists the acquired offsets of a share fetch answer with their
// delivery counts.
func acquired(p kmsg.ShareFetchResponseTopicPartition) map[int64]int16 {
	out := map[int64]int16{}
	for _, a := range p.AcquiredRecords {
		for o := a.FirstOffset; o <= a.LastOffset; o++ {
			out[o] = a.DeliveryCount
		}
	}
	return out
}

// TestShareGroupAcknowledgements: release brings a record back with its
// delivery count up by one, reject and accept never; an acknowledgement of
// a record the member does not hold is INVALID_RECORD_STATE and changes
// nothing; session epochs are checked; a member's closed connection gives
// its records to another member; the delivery limit archives.
func TestShareGroupAcknowledgements(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	const topic, group = "share-acks", "share-acks-g"
	admCl := newClient(t, n.KafkaAddr())
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, ctx, admCl, group, "share.auto.offset.reset", "earliest", "share.delivery.count.limit", "3")
	prod := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic))
	for i := range 20 {
		if err := prod.ProduceSync(ctx, kgo.StringRecord(strconv.Itoa(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	m1 := newShareMember(t, ctx, n.KafkaAddr(), group, "member-one", topic)
	got := acquired(m1.fetch(10))
	if len(got) != 10 || got[0] != 1 || got[9] != 1 {
		t.Fatalf("first fetch acquired %v, want offsets 0-9 once", got)
	}
	// Release 0-4, accept 5-7, reject 8-9.
	if top, part := m1.ack(m1.epoch, ackBatch(0, 4, 2), ackBatch(5, 7, 1), ackBatch(8, 9, 3)); top != 0 || part != 0 {
		t.Fatalf("acknowledge: %d %d", top, part)
	}
	// Accepting 5 again: not held. Nothing else changes.
	if _, part := m1.ack(m1.epoch, ackBatch(5, 5, 1)); part != kerr.InvalidRecordState.Code {
		t.Fatalf("acknowledging a settled record: code %d, want INVALID_RECORD_STATE", part)
	}
	// Epochs: a wrong one, and a session that does not exist.
	if top, _ := m1.ack(m1.epoch+5, ackBatch(0, 0, 1)); top != kerr.InvalidShareSessionEpoch.Code {
		t.Fatalf("wrong epoch: code %d", top)
	}
	m2 := newShareMember(t, ctx, n.KafkaAddr(), group, "member-two", topic)
	if top, _ := m2.ack(3, ackBatch(0, 0, 1)); top != kerr.ShareSessionNotFound.Code {
		t.Fatalf("no session: code %d", top)
	}
	got = acquired(m1.fetch(10))
	for o := int64(0); o < 5; o++ {
		if got[o] != 2 {
			t.Fatalf("released offset %d: delivery count %d, want 2 (%v)", o, got[o], got)
		}
	}
	for o := int64(5); o < 10; o++ {
		if _, ok := got[o]; ok {
			t.Fatalf("settled offset %d delivered again: %v", o, got)
		}
	}
	// Another member cannot settle member one's records.
	m2.fetch(1)
	if _, part := m2.ack(m2.epoch, ackBatch(0, 0, 1)); part != kerr.InvalidRecordState.Code {
		t.Fatalf("settling another member's record: code %d", part)
	}
	// Member one's connection closes: what it holds goes to member two.
	m1.cl.Close()
	deadline := time.Now().Add(30 * time.Second)
	recovered := map[int64]int16{}
	for len(recovered) < 5 && time.Now().Before(deadline) {
		for o, c := range acquired(m2.fetch(20)) {
			if o < 5 {
				recovered[o] = c
			}
		}
	}
	for o := int64(0); o < 5; o++ {
		if recovered[o] != 3 {
			t.Fatalf("offset %d after member one's connection closed: delivery count %d, want 3 (%v)", o, recovered[o], recovered)
		}
	}
	// At the delivery limit (3), a released record is archived.
	var batches []kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch
	for o := int64(0); o < 5; o++ {
		batches = append(batches, kmsg.ShareFetchRequestTopicPartitionAcknowledgementBatch{FirstOffset: o, LastOffset: o, AcknowledgeTypes: []int8{2}})
	}
	p := m2.fetch(20, batches...)
	if p.AcknowledgeErrorCode != 0 {
		t.Fatalf("release at the limit: code %d", p.AcknowledgeErrorCode)
	}
	for i := 0; i < 3; i++ {
		for o := range acquired(p) {
			if o < 5 {
				t.Fatalf("offset %d delivered past the delivery limit", o)
			}
		}
		p = m2.fetch(20)
	}
	// v2: renew the lock of the records member two holds (10-19), then
	// accept one.
	renew := kmsg.NewPtrShareAcknowledgeRequest()
	renew.GroupID, renew.MemberID, renew.ShareSessionEpoch, renew.IsRenewAck = &m2.group, &m2.id, m2.epoch, true
	rt := kmsg.NewShareAcknowledgeRequestTopic()
	rt.TopicID = m2.topicID
	rp := kmsg.NewShareAcknowledgeRequestTopicPartition()
	rp.AcknowledgementBatches = append(rp.AcknowledgementBatches, ackBatch(10, 19, 4))
	rt.Partitions = append(rt.Partitions, rp)
	renew.Topics = append(renew.Topics, rt)
	rresp, err := renew.RequestWith(ctx, m2.cl)
	if err != nil || rresp.ErrorCode != 0 || rresp.Topics[0].Partitions[0].ErrorCode != 0 || rresp.AcquisitionLockTimeoutMillis != 30000 {
		t.Fatalf("renew: %v %+v", err, rresp)
	}
	m2.epoch++
	if _, part := m2.ack(m2.epoch, ackBatch(10, 10, 1)); part != 0 {
		t.Fatalf("accept after renew: code %d", part)
	}
	adm := kadm.NewClient(admCl)
	offs, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := offs[group].Offsets.Lookup(topic, 0); !ok || o.StartOffset < 10 {
		t.Fatalf("start offset after 0-9 settled or archived: %+v", o)
	}
}

// TestShareGroupResetAndOffsets: a new group starts at the end (latest)
// or the start (earliest); an empty group's start offset is set, read and
// deleted with the admin calls; ListGroups lists share groups by type.
func TestShareGroupResetAndOffsets(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	const topic = "share-reset"
	admCl := newClient(t, n.KafkaAddr())
	adm := kadm.NewClient(admCl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	prod := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic))
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			if err := prod.ProduceSync(ctx, kgo.StringRecord(strconv.Itoa(i))).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(0, 10)
	setGroupConfigs(t, ctx, admCl, "share-earliest", "share.auto.offset.reset", "earliest")
	early := newShareMember(t, ctx, n.KafkaAddr(), "share-earliest", "early", topic)
	late := newShareMember(t, ctx, n.KafkaAddr(), "share-latest", "late", topic)
	if got := acquired(early.fetch(100)); len(got) != 10 {
		t.Fatalf("earliest: acquired %v, want 0-9", got)
	}
	if got := acquired(late.fetch(100)); len(got) != 0 {
		t.Fatalf("latest: acquired %v before anything new", got)
	}
	produce(10, 15)
	got := map[int64]int16{}
	for i := 0; i < 10 && len(got) < 5; i++ {
		for o, c := range acquired(late.fetch(100)) {
			got[o] = c
		}
	}
	for o := int64(10); o < 15; o++ {
		if _, ok := got[o]; !ok || len(got) != 5 {
			t.Fatalf("latest: acquired %v, want 10-14", got)
		}
	}

	listed, err := adm.ListGroupsByType(ctx, []string{"share"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["share-earliest"]; !ok {
		t.Fatalf("ListGroups share: %v", listed.Groups())
	}
	// A group with members is not altered.
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 3})
	if _, err := adm.AlterShareGroupOffsets(ctx, "share-latest", offs); err == nil {
		t.Fatal("altering a share group with members succeeded")
	}
	// An empty (new) group is.
	if resp, err := adm.AlterShareGroupOffsets(ctx, "share-admin", offs); err != nil {
		t.Fatalf("alter: %v", err)
	} else if err := resp.Error(); err != nil {
		t.Fatalf("alter: %v", err)
	}
	desc, err := adm.DescribeShareGroupOffsets(ctx, "share-admin")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := desc["share-admin"].Offsets.Lookup(topic, 0); !ok || o.StartOffset != 3 || o.Lag != 12 {
		t.Fatalf("described: %+v", o)
	}
	admin := newShareMember(t, ctx, n.KafkaAddr(), "share-admin", "admin", topic)
	// Share consumers look their assignment's topics up by id.
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.TopicID = admin.topicID
	md.Topics = append(md.Topics, mt)
	if resp, err := md.RequestWith(ctx, admCl); err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 ||
		resp.Topics[0].Topic == nil || *resp.Topics[0].Topic != topic {
		t.Fatalf("metadata by topic id: %v %+v", err, resp)
	}
	if got := acquired(admin.fetch(100)); len(got) != 12 || got[3] != 1 {
		t.Fatalf("after alter to 3: acquired %v", got)
	}
	admin.cl.Close()
	eventually(t, 30*time.Second, "the member's session ended", func() bool {
		_, err := adm.DeleteShareGroupOffsets(ctx, "share-admin", topic)
		if err == nil {
			return true
		}
		hb := kmsg.NewPtrShareGroupHeartbeatRequest()
		hb.GroupID, hb.MemberID, hb.MemberEpoch = "share-admin", "admin", -1
		_, _ = hb.RequestWith(ctx, admCl)
		return false
	})
	desc, err = adm.DescribeShareGroupOffsets(ctx, "share-admin")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := desc["share-admin"].Offsets.Lookup(topic, 0); ok && o.StartOffset != -1 {
		t.Fatalf("after delete: %+v", o)
	}
}

// TestShareGroupLockEnds: a member that holds records and goes silent
// (its connection open, no acknowledgement) loses them when their
// acquisition lock ends: another member acquires them with their delivery
// count up.
func TestShareGroupLockEnds(t *testing.T) {
	t.Parallel()
	n := startNode(t)
	ctx := ctxTimeout(t, 2*time.Minute)
	const topic, group = "share-lock", "share-lock-g"
	admCl := newClient(t, n.KafkaAddr())
	if _, err := kadm.NewClient(admCl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	setGroupConfigs(t, ctx, admCl, group, "share.auto.offset.reset", "earliest", "share.record.lock.duration.ms", "15000")
	prod := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic(topic))
	for i := range 5 {
		if err := prod.ProduceSync(ctx, kgo.StringRecord(strconv.Itoa(i))).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	silent := newShareMember(t, ctx, n.KafkaAddr(), group, "silent", topic)
	p := silent.fetch(10)
	if got := acquired(p); len(got) != 5 {
		t.Fatalf("silent member acquired %v", got)
	}
	start := time.Now()
	other := newShareMember(t, ctx, n.KafkaAddr(), group, "other", topic)
	got := map[int64]int16{}
	for len(got) < 5 && ctx.Err() == nil {
		for o, c := range acquired(other.fetch(10)) {
			got[o] = c
		}
	}
	waited := time.Since(start)
	for o := int64(0); o < 5; o++ {
		if got[o] != 2 {
			t.Fatalf("offset %d: delivery count %d after the lock ended (%v)", o, got[o], got)
		}
	}
	if waited < 10*time.Second {
		t.Fatalf("records came back after %v, before their 15 s lock ended", waited)
	}
	// The silent member's acknowledgement comes too late.
	if _, part := silent.ack(silent.epoch, ackBatch(0, 4, 1)); part != kerr.InvalidRecordState.Code {
		t.Fatalf("acknowledging after the lock ended: code %d", part)
	}
}
