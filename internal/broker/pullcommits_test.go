package broker

import (
	"context"
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestPulledOffsets: offsets carried by pulls are seen by offset queries at
// once, written by the flush (one record per group) or at close, and
// superseded by an explicit commit or deletion of their queues.
func TestPulledOffsets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f := open(t, dir)
	name, _ := model.ParseTopicName("pulled")
	tp, err := f.b.CreateTopic(ctx, name, 3, TopicConfig{})
	if err != nil {
		t.Fatal(err)
	}
	offsetsEnd := func() model.QueueOffset {
		_, _, end, _ := f.engine.Offsets(f.b.offsets.state.queues[f.b.offsets.partition("g")])
		return end
	}
	before := offsetsEnd()
	for i := range 100 {
		f.b.CommitPulled("g", tp.Queues[0], model.QueueOffset(i+1))
	}
	f.b.CommitPulled("g", tp.Queues[1], 7)
	if got, _ := f.b.FetchOffsets("g", name); got[0].Offset != 100 || got[1].Offset != 7 || got[0].LeaderEpoch != -1 {
		t.Fatalf("pending offsets not seen: %+v", got)
	}
	if after := offsetsEnd(); after != before {
		t.Fatalf("%d offset records written before the flush", after-before)
	}
	if err := f.b.flushPulled(ctx); err != nil {
		t.Fatal(err)
	}
	if n := offsetsEnd() - before; n != 1 {
		t.Fatalf("the flush wrote %d records, want 1", n)
	}
	eventually(t, "the flushed offsets applied", func() bool {
		f.b.offsets.mu.Lock()
		defer f.b.offsets.mu.Unlock()
		return f.b.offsets.groups["g"][tp.Queues[0]].Offset == 100
	})

	// An explicit commit replaces what a pull carried before it.
	f.b.CommitPulled("g", tp.Queues[1], 9)
	if err := f.b.CommitOffsets(ctx, "g", name, map[int32]OffsetCommit{1: {Offset: 3, LeaderEpoch: -1}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.b.FetchOffsets("g", name); got[1].Offset != 3 {
		t.Fatalf("explicit commit: queue 1 at %d, want 3", got[1].Offset)
	}
	// A deleted group forgets its pending offsets too.
	f.b.CommitPulled("gone", tp.Queues[0], 5)
	if err := f.b.DeleteGroupOffsets(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.b.FetchOffsets("gone", name); len(got) != 0 {
		t.Fatalf("deleted group: %+v", got)
	}

	// Close writes what is pending.
	f.b.CommitPulled("g", tp.Queues[2], 11)
	f.close(t)
	f = open(t, dir)
	defer f.close(t)
	got, _ := f.b.FetchOffsets("g", name)
	if got[0].Offset != 100 || got[1].Offset != 3 || got[2].Offset != 11 {
		t.Fatalf("after restart: %+v", got)
	}
}
