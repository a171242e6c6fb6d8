package broker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rosettamq/rosetta/internal/storage"
)

// StateDump renders the state the log determines in a stable text form:
// every queue's start, end and leader epochs, the records compaction left
// in compacted topics, every group's committed offsets, and the pending
// timer messages, as of every state record written before the call. Two
// nodes that applied the same
// log dump the same text (the replay-equivalence tests compare them).
// Delivery cursors and other local progress are left out: they say how far
// a node got, not what the log holds.
func (b *Broker) StateDump() string {
	var sb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := b.SettleStates(ctx)
	cancel()
	if err != nil {
		fmt.Fprintf(&sb, "settle: %v\n", err)
	}
	topics := b.Topics(true)
	sort.Slice(topics, func(i, j int) bool { return topics[i].FullName < topics[j].FullName })
	for _, t := range topics {
		if t.Name == timerCursorTopic {
			continue // delivery progress, saved at every stop
		}
		for i, q := range t.Queues {
			start, hw, end, err := b.engine.Offsets(q)
			if err != nil {
				fmt.Fprintf(&sb, "queue %s/%d: %v\n", t.FullName, i, err)
				continue
			}
			epochs, _ := b.engine.Epochs(q)
			fmt.Fprintf(&sb, "queue %s/%d start=%d hw=%d end=%d epochs=%v\n", t.FullName, i, start, hw, end, epochs)
			if t.Config.Compacted() {
				// The compaction results: which records are left.
				var kept []string
				_ = b.engine.ScanIndex(q, start, func(e storage.IndexEntry) bool {
					if !e.Hole {
						kept = append(kept, fmt.Sprintf("%d+%d", e.BaseOffset, e.Count))
					}
					return true
				})
				fmt.Fprintf(&sb, "compacted %s/%d kept=%v\n", t.FullName, i, kept)
			}
		}
	}
	groups := b.OffsetGroups()
	sort.Strings(groups)
	for _, g := range groups {
		var lines []string
		for t, parts := range b.FetchAllOffsets(g) {
			for i, c := range parts {
				lines = append(lines, fmt.Sprintf("offset %s %s/%d=%d epoch=%d meta=%q time=%d", g, t.FullName, i, c.Offset, c.LeaderEpoch, c.Metadata, c.CommitTime))
			}
		}
		sort.Strings(lines)
		for _, l := range lines {
			sb.WriteString(l + "\n")
		}
	}
	if w := b.timers; w != nil {
		var pending []string
		_ = b.engine.ScanIndex(w.queue, 0, func(e storage.IndexEntry) bool {
			pending = append(pending, fmt.Sprintf("timer due=%d offset=%d", e.TagHash, e.BaseOffset))
			return true
		})
		start, _, _, _ := b.engine.Offsets(w.queue)
		fmt.Fprintf(&sb, "timers from=%d entries=%d\n", start, len(pending))
		for _, p := range pending {
			sb.WriteString(p + "\n")
		}
	}
	return sb.String()
}
