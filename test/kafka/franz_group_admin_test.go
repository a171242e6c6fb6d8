package kafka_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFranzGroupAdminAndStaticMembers covers static membership (a member
// that restarts with the same instance id keeps its member id), describe,
// list, offset delete and group delete through kadm.
func TestFranzGroupAdminAndStaticMembers(t *testing.T) {
	n := startNode(t)
	ctx := ctxTimeout(t, time.Minute)
	adm := kadm.NewClient(newClient(t, n.KafkaAddr()))
	if _, err := adm.CreateTopic(ctx, 4, 1, nil, "static"); err != nil {
		t.Fatal(err)
	}
	p := newClient(t, n.KafkaAddr(), kgo.DefaultProduceTopic("static"))
	for i := 0; i < 40; i++ {
		if err := p.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	member := func() *kgo.Client {
		return newClient(t, n.KafkaAddr(), kgo.ConsumeTopics("static"), kgo.ConsumerGroup("static-group"),
			kgo.InstanceID("instance-1"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.SessionTimeout(6*time.Second))
	}
	c := member()
	got := 0
	for got < 40 {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := c.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	described, err := adm.DescribeGroups(ctx, "static-group")
	if err != nil {
		t.Fatal(err)
	}
	g := described["static-group"]
	if g.State != "Stable" || len(g.Members) != 1 || g.Members[0].InstanceID == nil || *g.Members[0].InstanceID != "instance-1" {
		t.Fatalf("described %+v", g)
	}
	firstID := g.Members[0].MemberID
	// A static member closing does not leave the group; its replacement with
	// the same instance id takes over the same member id.
	c.CloseAllowingRebalance()
	c2 := member()
	c2.PollFetches(ctxTimeout(t, 2*time.Second))
	eventually(t, 20*time.Second, "static member rejoined", func() bool {
		d, err := adm.DescribeGroups(ctx, "static-group")
		return err == nil && len(d["static-group"].Members) == 1 && d["static-group"].Members[0].MemberID == firstID &&
			d["static-group"].State == "Stable"
	})
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := listed["static-group"]; !ok {
		t.Fatalf("list groups: %+v", listed)
	}
	// Leave explicitly (KIP-345 batch leave by instance id), then delete.
	if _, err := adm.LeaveGroup(ctx, kadm.LeaveGroup("static-group").InstanceIDs("instance-1")); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	eventually(t, 20*time.Second, "group empty", func() bool {
		d, err := adm.DescribeGroups(ctx, "static-group")
		return err == nil && len(d["static-group"].Members) == 0
	})
	if _, err := adm.DeleteOffsets(ctx, "static-group", kadm.TopicsSet{"static": {0: {}}}); err != nil {
		t.Fatal(err)
	}
	offs, err := adm.FetchOffsets(ctx, "static-group")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := offs.Lookup("static", 0); ok {
		t.Fatal("offset of partition 0 still committed after OffsetDelete")
	}
	if _, ok := offs.Lookup("static", 1); !ok {
		t.Fatal("offset of partition 1 lost")
	}
	dr, err := adm.DeleteGroups(ctx, "static-group")
	if err != nil || dr["static-group"].Err != nil {
		t.Fatalf("delete group: %v %+v", err, dr)
	}
	offs, _ = adm.FetchOffsets(ctx, "static-group")
	if _, ok := offs.Lookup("static", 1); ok {
		t.Fatal("offsets survive group deletion")
	}
}
