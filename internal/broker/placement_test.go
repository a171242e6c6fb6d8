package broker

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// groupBrokers opens n brokers, one per replication group, each over its
// own engine and all over one metadata store, as a cluster's group leaders
// are.
func groupBrokers(t *testing.T, dir string, n int) ([]*Broker, func()) {
	t.Helper()
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	bs, closeAll := groupBrokersOver(t, dir, m, n)
	return bs, func() {
		closeAll()
		m.Close()
	}
}

// groupBrokersOver is groupBrokers over an open metadata store.
func groupBrokersOver(t *testing.T, dir string, m meta.Store, n int) ([]*Broker, func()) {
	t.Helper()
	return groupBrokersWith(t, dir, m, n, nil)
}

// groupBrokersWith is groupBrokersOver with the brokers reaching each
// other's groups through elsewhere (nil: not at all).
func groupBrokersWith(t *testing.T, dir string, m meta.Store, n int, elsewhere Elsewhere) ([]*Broker, func()) {
	t.Helper()
	var bs []*Broker
	var engines []*storage.Engine
	for g := range n {
		c := storage.DefaultConfig(filepath.Join(dir, "group", string(rune('0'+g))))
		c.SegmentSize, c.MaxRecordSize, c.MinFreeBytes, c.MinFreeRatio = 1<<20, 256<<10, 0, 0
		e, err := storage.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(context.Background(), e, m, Options{AutoCreateTopics: true, DefaultQueues: 2,
			Placement: route.Placement{Group: model.GroupID(g), Groups: n}, Elsewhere: elsewhere})
		if err != nil {
			t.Fatal(err)
		}
		bs, engines = append(bs, b), append(engines, e)
	}
	return bs, func() {
		for i, b := range bs {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
			if err := engines[i].Close(); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestBrokersPerGroup: with queues spread over two groups, each group's
// broker sees a topic as its own queues — made by either broker, grown by
// the other, written and read in its own engine — broker-made topics get
// queues in every group, and a topic deleted by one broker is gone from
// the other with its queues; a restarted broker sees the same.
func TestBrokersPerGroup(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bs, closeAll := groupBrokers(t, dir, 2)
	name, _ := model.ParseTopicName("orders")
	made, err := bs[0].CreateTopic(ctx, name, 3, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if len(made.All) != 6 || len(made.Queues) != 3 {
		t.Fatalf("made %d queues, %d of them group 0's", len(made.All), len(made.Queues))
	}
	eventually(t, "group 1's broker to see the topic", func() bool {
		t1, err := bs[1].Topic(name)
		return err == nil && slices.Equal(t1.Queues, []model.QueueID{made.All[1], made.All[3], made.All[5]})
	})
	for g, b := range bs {
		tp, _ := b.Topic(name)
		offs, err := b.AppendMessages(ctx, name, 2, []model.Message{{Body: []byte("in group " + string(rune('0'+g)))}})
		if err != nil || offs[0] != 0 {
			t.Fatalf("group %d append: %v %v", g, offs, err)
		}
		if _, hw, _, err := b.Offsets(name, 2); err != nil || hw != 1 {
			t.Fatalf("group %d offsets: %d %v", g, hw, err)
		}
		if ref, err := b.QueueByID(tp.Queues[2]); err != nil || ref.Index != 2 {
			t.Fatalf("group %d queue by id: %+v %v", g, ref, err)
		}
		if _, err := b.QueueByID(made.All[1-g]); err == nil {
			t.Fatalf("group %d finds the other group's queue", g)
		}
	}

	grown, err := bs[1].GrowTopic(ctx, name, 5)
	if err != nil || len(grown.Queues) != 5 || len(grown.All) != 10 {
		t.Fatalf("grow: %v %+v", err, grown)
	}
	eventually(t, "group 0's broker to see the growth", func() bool {
		t0, err := bs[0].Topic(name)
		return err == nil && len(t0.Queues) == 5
	})
	if _, err := bs[0].AppendMessages(ctx, name, 4, []model.Message{{Body: []byte("new queue")}}); err != nil {
		t.Fatal(err)
	}

	retry := []*Topic{}
	for _, b := range bs {
		rt, err := b.EnsureRetryTopic(ctx, "billing")
		if err != nil {
			t.Fatal(err)
		}
		retry = append(retry, rt)
	}
	if len(retry[0].Queues) != 1 || len(retry[1].Queues) != 1 || retry[0].Queues[0] == retry[1].Queues[0] {
		t.Fatalf("retry topic queues: %v and %v", retry[0].Queues, retry[1].Queues)
	}

	other, _ := model.ParseTopicName("scratch")
	scratch, err := bs[1].CreateTopic(ctx, other, 1, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "group 0's broker to see the second topic", func() bool { _, err := bs[0].Topic(other); return err == nil })
	if err := bs[0].DeleteTopic(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "group 1's broker to forget it and its queue", func() bool {
		_, err := bs[1].Topic(other)
		return err != nil && !slices.Contains(bs[1].engine.QueueIDs(), scratch.Queues[0])
	})

	closeAll()
	bs, closeAll = groupBrokers(t, dir, 2)
	defer closeAll()
	for g, b := range bs {
		tp, err := b.Topic(name)
		if err != nil || len(tp.Queues) != 5 || len(tp.All) != 10 {
			t.Fatalf("group %d after a restart: %v %+v", g, err, tp)
		}
		if _, hw, _, _ := b.Offsets(name, 2); hw != 1 {
			t.Fatalf("group %d lost its record", g)
		}
	}
}

// TestTopicTables: a topic recorded before tables spreads as the cluster
// was made (queue i in group i mod 2); one recorded with a table puts each
// queue where it says, numbered within the group in topic order; a topic a
// broker makes records its table.
func TestTopicTables(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	full := func(short string) string { n, _ := model.ParseTopicName(short); return n.String() }
	if err := meta.Put(ctx, m, "topics/"+full("legacy"), []byte(`{"name":"`+full("legacy")+`","queues":[11,12,13,14,15],"config":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := meta.Put(ctx, m, "topics/"+full("tabled"), []byte(`{"name":"`+full("tabled")+`","queues":[21,22,23,24,25],"groups":[0,0,1,1,0],"config":{}}`)); err != nil {
		t.Fatal(err)
	}
	if err := meta.Put(ctx, m, "ids/queue", []byte("100")); err != nil {
		t.Fatal(err)
	}
	bs, closeAll := groupBrokersOver(t, dir, m, 2)
	defer closeAll()
	topic := func(g int, name string) *Topic {
		t.Helper()
		n, _ := model.ParseTopicName(name)
		tp, err := bs[g].Topic(n)
		if err != nil {
			t.Fatal(err)
		}
		return tp
	}
	if q := topic(0, "legacy").Queues; !slices.Equal(q, []model.QueueID{11, 13, 15}) {
		t.Fatalf("legacy topic in group 0: %v", q)
	}
	if q := topic(1, "legacy").Queues; !slices.Equal(q, []model.QueueID{12, 14}) {
		t.Fatalf("legacy topic in group 1: %v", q)
	}
	tab := topic(1, "tabled")
	if !slices.Equal(topic(0, "tabled").Queues, []model.QueueID{21, 22, 25}) || !slices.Equal(tab.Queues, []model.QueueID{23, 24}) {
		t.Fatalf("tabled topic: %v and %v", topic(0, "tabled").Queues, tab.Queues)
	}
	if tab.GroupOf(3) != 1 || tab.LocalIndex(3) != 1 || tab.LocalIndex(4) != 2 || tab.GlobalIndex(0, 2) != 4 || tab.CountIn(0) != 3 {
		t.Fatalf("tabled topic's numbering: %v", tab.Groups)
	}
	// Grown whole (Kafka's CreatePartitions): the new queues even the
	// groups out.
	n, _ := model.ParseTopicName("tabled")
	grown, err := bs[0].GrowWholeTopic(ctx, n, 8)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(grown.Groups, route.Table{0, 0, 1, 1, 0, 1, 0, 1}) {
		t.Fatalf("grown table %v", grown.Groups)
	}
	madeName, _ := model.ParseTopicName("made")
	made, err := bs[1].CreateWholeTopic(ctx, madeName, 3, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := m.Get(ctx, "topics/"+full("made"))
	if err != nil || !strings.Contains(string(kv.Value), `"groups":[0,1,0]`) || !slices.Equal(made.Queues, made.All[1:2]) {
		t.Fatalf("recorded %s (%v)", kv.Value, err)
	}
}
