package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/rosettamq/rosetta/internal/model"
	"github.com/rosettamq/rosetta/internal/storage"
)

// groupsTopic is the internal topic of consumer-group coordinator state
// (what Kafka keeps as group metadata records in __consumer_offsets). It
// has as many queues as the offsets topic, and a group's records go to the
// same queue index as its offsets, so both live with its coordinator.
var groupsTopic = model.TopicName{Tenant: "system", Namespace: "internal", Topic: "consumer_groups"}

// Group state records: op u8 | group len u16 | group | image.
const (
	opGroupImage = 1
	opGroupGone  = 2
)

// groupImages keeps each consumer group's latest coordinator image (opaque
// bytes the coordinator encodes) as a state machine over the groups
// queues, kept by a StateLog.
type groupImages struct {
	log   *slog.Logger
	state *StateLog
	n     int

	mu     sync.Mutex
	images map[string][]byte
}

// startGroupImages opens the groups topic and loads the images.
func (b *Broker) startGroupImages(ctx, bctx context.Context) error {
	t, err := b.internalTopic(ctx, groupsTopic, offsetsPartitions)
	if err != nil {
		return fmt.Errorf("groups topic: %w", err)
	}
	s := &groupImages{log: b.log, n: len(t.Queues), images: map[string][]byte{}}
	s.state = b.NewStateLog(groupsSection, t.Queues, s)
	if _, err := s.state.Load(); err != nil {
		return fmt.Errorf("load group state: %w", err)
	}
	b.groupImages = s
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		s.state.Run(bctx, b.opts.OffsetSnapshotInterval)
	}()
	return nil
}

// groupsSection names the group images' checkpoint section.
const groupsSection = "broker.groups"

// GroupImages returns every consumer group's persisted coordinator image
// (what a coordinator restores before it serves).
func (b *Broker) GroupImages() map[string][]byte {
	s := b.groupImages
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte, len(s.images))
	for g, img := range s.images {
		out[g] = img
	}
	return out
}

// PersistGroup writes a consumer group's coordinator image (nil: the group
// is gone) and waits until it is durable (committed, in a cluster).
func (b *Broker) PersistGroup(ctx context.Context, group string, image []byte) error {
	s := b.groupImages
	op := byte(opGroupImage)
	if image == nil {
		op = opGroupGone
	}
	payload := encodeGroupEntry(op, group, image)
	r := &storage.Record{Format: model.FormatInternal, Count: 1, Payload: payload}
	return s.state.Write(ctx, KeyPartition(group, s.n), []*storage.Record{r}, nil, storage.AppendOptions{})
}

func encodeGroupEntry(op byte, group string, image []byte) []byte {
	b := make([]byte, 0, 3+len(group)+len(image))
	b = append(b, op)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(group)))
	b = append(b, group...)
	return append(b, image...)
}

// decodeGroupEntry parses a record (op included) or a snapshot entry (op
// 0: no op byte).
func decodeGroupEntry(b []byte, withOp bool) (op byte, group string, image []byte, err error) {
	r := &msgReader{b: b}
	op = opGroupImage
	if withOp {
		if v := r.take(1); v != nil {
			op = v[0]
		}
	}
	group = string(r.take(r.u16()))
	if r.err != nil {
		return 0, "", nil, r.err
	}
	if op != opGroupImage && op != opGroupGone {
		return 0, "", nil, fmt.Errorf("%w: group state op %d", model.ErrCorruptRecord, op)
	}
	return op, group, append([]byte(nil), r.b...), nil
}

// Apply implements StateMachine: one image or removal.
func (s *groupImages) Apply(i int, at model.QueueOffset, payload []byte) {
	op, group, image, err := decodeGroupEntry(payload, true)
	if err != nil {
		s.log.Error("skipping bad group state record", "queue_index", i, "offset", at, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if op == opGroupGone {
		delete(s.images, group)
		return
	}
	s.images[group] = image
}

// Entries implements StateMachine: queue i's groups, by name.
func (s *groupImages) Entries(i int) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for g := range s.images {
		if KeyPartition(g, s.n) == i {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	out := make([][]byte, len(names))
	for j, g := range names {
		out[j] = encodeGroupEntry(0, g, s.images[g])[1:]
	}
	return out
}

// Restore implements StateMachine.
func (s *groupImages) Restore(i int, entries [][]byte) error {
	images := make(map[string][]byte, len(entries))
	for _, e := range entries {
		_, g, image, err := decodeGroupEntry(e, false)
		if err != nil {
			return err
		}
		images[g] = image
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.images {
		if KeyPartition(g, s.n) == i {
			delete(s.images, g)
		}
	}
	for g, img := range images {
		s.images[g] = img
	}
	return nil
}

// Len implements StateMachine.
func (s *groupImages) Len(i int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for g := range s.images {
		if KeyPartition(g, s.n) == i {
			n++
		}
	}
	return n
}
