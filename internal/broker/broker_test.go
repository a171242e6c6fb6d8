package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rosettamq/rosetta/internal/broker/route"

	"github.com/rosettamq/rosetta/internal/meta"
	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

type fixture struct {
	dir    string
	engine *storage.Engine
	meta   *meta.BoltStore
	b      *Broker
}

func open(t *testing.T, dir string) *fixture {
	t.Helper()
	return openWith(t, dir, Options{AutoCreateTopics: true})
}

func openWith(t *testing.T, dir string, opts Options) *fixture {
	t.Helper()
	c := storage.DefaultConfig(filepath.Join(dir, "data"))
	c.SegmentSize = 1 << 20
	c.MaxRecordSize = 256 << 10
	c.MinFreeBytes, c.MinFreeRatio = 0, 0
	c.Durability = storage.DurabilitySync
	e, err := storage.Open(c)
	if err != nil {
		t.Fatal(err)
	}
	m, err := meta.OpenBolt(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(context.Background(), e, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, engine: e, meta: m, b: b}
}

func (f *fixture) close(t *testing.T) {
	t.Helper()
	if err := f.b.Close(); err != nil {
		t.Fatal(err)
	}
	f.engine.Close()
	f.meta.Close()
}

func TestTopicsMessagesOffsetsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("orders")
	if _, err := f.b.CreateTopic(ctx, name, 4, TopicConfig{MessageType: MessageTypeNormal}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.CreateTopic(ctx, name, 4, TopicConfig{}); !errors.Is(err, model.ErrTopicExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	for i := 0; i < 50; i++ {
		offs, err := f.b.AppendMessages(ctx, name, int32(i%4), []model.Message{{Key: []byte(fmt.Sprint("k", i)), Tags: "A", Body: []byte(fmt.Sprint("body", i))}})
		if err != nil || offs[0] != model.QueueOffset(i/4) {
			t.Fatalf("append %d: %v %v", i, offs, err)
		}
	}
	if err := f.b.CommitOffsets(ctx, "g1", name, map[int32]OffsetCommit{0: {Offset: 5, Metadata: "m"}, 2: {Offset: 7}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.GrowTopic(ctx, name, 6); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.GrowTopic(ctx, name, 3); !errors.Is(err, model.ErrInvalidQueueCount) {
		t.Fatalf("shrink: %v", err)
	}
	f.close(t)

	f = open(t, dir)
	defer f.close(t)
	tp, err := f.b.Topic(name)
	if err != nil || tp.QueueCount() != 6 {
		t.Fatalf("topic after restart: %+v %v", tp, err)
	}
	got, _ := f.b.FetchOffsets("g1", name)
	if len(got) != 2 || got[0].Offset != 5 || got[0].Metadata != "m" || got[2].Offset != 7 {
		t.Fatalf("offsets after restart: %+v", got)
	}
	if none, _ := f.b.FetchOffsets("nobody", name); len(none) != 0 {
		t.Fatalf("unknown group has offsets: %v", none)
	}
	res, err := f.b.Read(name, 1, 0, storage.ReadOptions{})
	if err != nil || len(res.Records) != 13 {
		t.Fatalf("read: %v %d", err, len(res.Records))
	}
	m, err := DecodeMessage(res.Records[2].Payload)
	if err != nil || string(m.Body) != "body9" || m.Tags != "A" {
		t.Fatalf("message: %+v %v", m, err)
	}
	res.Release()
	if err := f.b.DeleteTopic(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Read(name, 0, 0, storage.ReadOptions{}); !errors.Is(err, model.ErrUnknownTopic) {
		t.Fatalf("read deleted: %v", err)
	}
}

// TestOffsetSnapshotAndReplay: committed offsets are rebuilt from the
// checkpoint and the records after it, and from the log alone (no
// checkpoint), across an in-log snapshot that trimmed older records.
func TestOffsetSnapshotAndReplay(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("t")
	_, _ = f.b.CreateTopic(ctx, name, 2, TopicConfig{})
	for i := 0; i < 10; i++ {
		_ = f.b.CommitOffsets(ctx, "g", name, map[int32]OffsetCommit{0: {Offset: model.QueueOffset(i), LeaderEpoch: 0}})
	}
	_ = f.b.CommitOffsets(ctx, "old", name, map[int32]OffsetCommit{1: {Offset: 3, LeaderEpoch: -1}})
	if err := f.b.offsets.state.SnapshotAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	gq := f.b.offsets.state.queues[f.b.offsets.partition("g")]
	if start, _, end, _ := f.engine.Offsets(gq); start != end-1 {
		t.Fatalf("queue of g not trimmed to its snapshot: [%d, %d)", start, end)
	}
	_ = f.b.CommitOffsets(ctx, "g", name, map[int32]OffsetCommit{0: {Offset: 42, Metadata: "m", LeaderEpoch: 0}})
	_ = f.b.CommitOffsets(ctx, "h", name, map[int32]OffsetCommit{0: {Offset: 1}})
	_ = f.b.DeleteGroupOffsets(ctx, "h")
	_ = f.b.CommitOffsetsNoWait(ctx, "n", name, map[int32]OffsetCommit{1: {Offset: 7}})
	check := func(when string) {
		t.Helper()
		eventually(t, when+": n's one-way commit applied", func() bool {
			got, _ := f.b.FetchOffsets("n", name)
			return got[1].Offset == 7
		})
		got, _ := f.b.FetchOffsets("g", name)
		if c := got[0]; c.Offset != 42 || c.Metadata != "m" || c.LeaderEpoch != 0 {
			t.Fatalf("%s: g committed %+v", when, c)
		}
		if old, _ := f.b.FetchOffsets("old", name); old[1].Offset != 3 || old[1].LeaderEpoch != -1 {
			t.Fatalf("%s: old committed %+v", when, old[1])
		}
		if h, _ := f.b.FetchOffsets("h", name); len(h) != 0 {
			t.Fatalf("%s: deleted group has %v", when, h)
		}
	}
	check("live")
	f.close(t)
	f = open(t, dir)
	check("from the checkpoint")
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.close(t)
	check("from the log alone")
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAutoCreateAndWait(t *testing.T) { synctest.Test(t, testAutoCreateAndWait) }

func testAutoCreateAndWait(t *testing.T) {
	ctx := context.Background()
	f := open(t, t.TempDir())
	defer f.close(t)
	name, _ := model.ParseTopicName("tenant1/ns1/auto")
	tp, err := f.b.EnsureTopic(ctx, name)
	if err != nil || tp.QueueCount() != 8 {
		t.Fatalf("auto create: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		done <- f.b.Wait(wctx, []Watch{{Topic: name, Index: 3}})
	}()
	synctest.Wait() // the waiter is parked
	if _, err := f.b.AppendMessages(ctx, name, 3, []model.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := f.b.Topics(false); len(got) != 1 || got[0].FullName != "tenant1/ns1/auto" {
		t.Fatalf("topics: %v", got)
	}
}

func FuzzDecodeOffsetRecord(f *testing.F) {
	f.Add(encodeOffsetRecord(opCommit, "group", []OffsetCommit{{Queue: 1, Offset: 2, Metadata: "m"}}, 3))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, g, cs, now, err := decodeOffsetRecord(b)
		if err != nil {
			return
		}
		again := encodeOffsetRecord(op, g, cs, now)
		op2, g2, cs2, now2, err := decodeOffsetRecord(again)
		if err != nil || op2 != op || g2 != g || len(cs2) != len(cs) || now2 != now {
			t.Fatal("unstable")
		}
	})
}

func FuzzDecodeGroupSnapshot(f *testing.F) {
	f.Add(encodeGroupSnapshot(map[model.QueueID]Committed{1: {Offset: 3, Metadata: "x"}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := decodeGroupSnapshot(b)
		if err != nil {
			return
		}
		if _, err := decodeGroupSnapshot(encodeGroupSnapshot(g)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDelayLevelDelivery(t *testing.T) {
	f := open(t, t.TempDir())
	defer f.close(t)
	ctx := context.Background()
	name := model.TopicName{Tenant: "public", Namespace: "default", Topic: "later"}
	if _, err := f.b.CreateTopic(ctx, name, 2, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	m := model.Message{Body: []byte("x"), Headers: []model.Header{{Key: HeaderDelayLevel, Value: []byte("1")}, {Key: "k", Value: []byte("v")}}}
	if _, _, err := f.b.AppendDelayed(ctx, name, 1, m, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.b.AppendDelayed(ctx, name, 1, m, 0); !errors.Is(err, ErrInvalidDelayLevel) {
		t.Fatalf("level 0: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := f.b.Wait(wctx, []Watch{{Topic: name, Index: 1}}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(sent); took < 900*time.Millisecond {
		t.Fatalf("delivered after %v, before the 1 s level", took)
	}
	res, err := f.b.Read(name, 1, 0, ReadOptions{})
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("%v %v", res, err)
	}
	got, _ := DecodeMessage(res.Records[0].Payload)
	if _, ok := got.Header(HeaderDelayLevel); ok || string(got.Body) != "x" {
		t.Fatalf("delivered %+v", got)
	}
	if v, _ := got.Header("k"); string(v) != "v" {
		t.Fatalf("headers lost: %+v", got.Headers)
	}
	res.Release()
}

func TestParseDelayLevels(t *testing.T) {
	got, err := ParseDelayLevels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")
	if err != nil || len(got) != 18 || got[0] != time.Second || got[17] != 2*time.Hour {
		t.Fatalf("RocketMQ defaults: %v %v", got, err)
	}
	if got, err := ParseDelayLevels(" 500s  2d "); err != nil || len(got) != 2 || got[1] != 48*time.Hour {
		t.Fatalf("spaces and days: %v %v", got, err)
	}
	for _, bad := range []string{"", "5", "1x", "-1s", "0m", "1.5s", "400d"} {
		if _, err := ParseDelayLevels(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestLegacyOffsetsMigrate: offsets older versions kept in the metadata
// store (a snapshot plus the single queue after it) move into the queues
// and the old keys go.
func TestLegacyOffsetsMigrate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("t")
	tp, _ := f.b.CreateTopic(ctx, name, 1, TopicConfig{})
	q0 := f.b.offsets.state.queues[0]
	// A legacy record in queue 0 for a group of another queue, newer than
	// the legacy snapshot.
	group := "legacy"
	if f.b.offsets.partition(group) == 0 {
		t.Fatal("pick a group outside queue 0")
	}
	r := &storage.Record{Queue: q0, Format: model.FormatInternal, Count: 1,
		Payload: encodeOffsetRecord(opCommit, group, []OffsetCommit{{Queue: tp.Queues[0], Offset: 9}}, 1)}
	if err := f.engine.Append(ctx, []*storage.Record{r}); err != nil {
		t.Fatal(err)
	}
	snap := encodeGroupSnapshot(map[model.QueueID]Committed{tp.Queues[0]: {Offset: 5}})
	if _, err := f.meta.Txn(ctx, nil, []meta.Op{
		{Key: legacyOffsetsGroupPrefix + group, Value: snap},
		{Key: legacyOffsetsGroupPrefix + "quiet", Value: snap},
		{Key: legacyOffsetsAppliedKey, Value: []byte(strconv.FormatInt(int64(r.BaseOffset), 10))},
	}); err != nil {
		t.Fatal(err)
	}
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil { // an older version's has no section
		t.Fatal(err)
	}
	f = open(t, dir)
	if got, _ := f.b.FetchOffsets(group, name); got[0].Offset != 9 || got[0].LeaderEpoch != -1 {
		t.Fatalf("migrated %s: %+v", group, got[0])
	}
	if got, _ := f.b.FetchOffsets("quiet", name); got[0].Offset != 5 {
		t.Fatalf("migrated quiet: %+v", got[0])
	}
	if kvs, _ := f.meta.List(ctx, "offsets/"); len(kvs) != 0 {
		t.Fatalf("legacy keys left: %v", kvs)
	}
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.close(t)
	if got, _ := f.b.FetchOffsets(group, name); got[0].Offset != 9 {
		t.Fatalf("%s from the log alone after migration: %+v", group, got[0])
	}
}

// notHere is a router that sends every queue elsewhere.
type notHere struct{}

func (notHere) Locate(model.QueueID) route.Location {
	return route.Location{Leader: 7, Epoch: 3}
}

// TestNotLeaderRefused: a queue the router places on another node is
// refused with a *model.NotLeaderError naming the leader.
func TestNotLeaderRefused(t *testing.T) {
	ctx := context.Background()
	f := openWith(t, t.TempDir(), Options{AutoCreateTopics: true})
	defer f.close(t)
	name, _ := model.ParseTopicName("t")
	if _, err := f.b.CreateTopic(ctx, name, 1, TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	f.b.opts.Router = notHere{}
	_, err := f.b.AppendMessages(ctx, name, 0, []model.Message{{Body: []byte("x")}})
	var nl *model.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader != 7 || nl.Epoch != 3 || !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("append: %v", err)
	}
	if _, err := f.b.Read(name, 0, 0, storage.ReadOptions{}); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("read: %v", err)
	}
	if loc, _ := f.b.Locate(name, 0); loc.Leader != 7 || loc.Local {
		t.Fatalf("locate: %+v", loc)
	}
}

func FuzzDecodeStateEntries(f *testing.F) {
	f.Add(appendEntries(nil, true, [][]byte{[]byte("a"), {}, []byte("bcd")}))
	f.Add(appendEntries(nil, false, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		last, entries, err := decodeEntries(b)
		if err != nil {
			return
		}
		again, entries2, err := decodeEntries(appendEntries(nil, last, entries))
		if err != nil || again != last || len(entries2) != len(entries) {
			t.Fatalf("unstable: %v", err)
		}
	})
}

// TestOffsetSnapshotInParts: a snapshot larger than a part is written in
// several records, applied as one replacement (when the node recovers from
// the log alone too).
func TestOffsetSnapshotInParts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("t")
	_, _ = f.b.CreateTopic(ctx, name, 1, TopicConfig{})
	f.b.offsets.state.partBytes = 64
	groups := 0
	for i := 0; groups < 20; i++ {
		g := fmt.Sprint("g", i)
		if f.b.offsets.partition(g) != 0 {
			continue
		}
		groups++
		if err := f.b.CommitOffsets(ctx, g, name, map[int32]OffsetCommit{0: {Offset: model.QueueOffset(i), LeaderEpoch: -1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.b.offsets.state.SnapshotAll(ctx, true); err != nil {
		t.Fatal(err)
	}
	q := f.b.offsets.state.queues[0]
	if start, _, end, _ := f.engine.Offsets(q); end-start < 3 {
		t.Fatalf("snapshot in %d records, want several parts", end-start)
	}
	f.close(t)
	if err := os.Remove(filepath.Join(dir, "data", "checkpoint")); err != nil {
		t.Fatal(err)
	}
	f = open(t, dir)
	defer f.close(t)
	n := 0
	for _, g := range f.b.OffsetGroups() {
		if f.b.offsets.partition(g) == 0 {
			n++
		}
	}
	if n != groups {
		t.Fatalf("%d groups of queue 0 after replaying a snapshot in parts, want %d", n, groups)
	}
}
