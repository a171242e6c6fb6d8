package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/broker/route"
	"github.com/rosettamq/rosetta/internal/model"
)

// A queue moved to another group keeps its history where it was
// (route.Moves): the leader of its current group answers a fetch below
// its piece there with the records of the piece holding the offset, read
// at the leader of that piece's group.

// HistoryRead asks for a moved queue's records in one of its old pieces:
// from Offset, before End (where the next piece begins), at most MaxBytes
// (at least one record); Committed stops at the piece's last stable offset
// and lists its aborted transactions.
type HistoryRead struct {
	Queue     model.QueueID     `json:"q"`
	Offset    model.QueueOffset `json:"o"`
	End       model.QueueOffset `json:"e"`
	MaxBytes  int               `json:"m"`
	Committed bool              `json:"c,omitempty"`
	// ByTime asks instead for the piece's first offset whose timestamp is
	// at or after Time (HistoryAnswer.Offset, -1 for none before End).
	ByTime bool  `json:"bt,omitempty"`
	Time   int64 `json:"t,omitempty"`
}

// HistoryAnswer is a piece's records as Kafka batches, its start (the
// queue's log start when it is the first piece) and the aborted
// transactions among the records.
type HistoryAnswer struct {
	Batches []byte            `json:"b,omitempty"`
	Start   model.QueueOffset `json:"s"`
	Aborted []AbortedTxn      `json:"a,omitempty"`
	// Offset and Timestamp answer a ByTime read.
	Offset    model.QueueOffset `json:"o,omitempty"`
	Timestamp int64             `json:"ts,omitempty"`
}

// AbortedTxn is an aborted transaction's producer and first offset.
type AbortedTxn struct {
	PID   int64             `json:"p"`
	First model.QueueOffset `json:"f"`
}

// ReadHistory answers a HistoryRead for group g, led here.
func (s *Server) ReadHistory(g int, r HistoryRead) (HistoryAnswer, error) {
	set := *s.be.cur.Load()
	if g < 0 || g >= len(set) || set[g] == nil {
		return HistoryAnswer{}, fmt.Errorf("%w: group %d is not led here", model.ErrNotLeader, g)
	}
	be := set[g]
	e := be.broker.Engine()
	start, hw, _, err := e.Offsets(r.Queue)
	if err != nil {
		return HistoryAnswer{}, err
	}
	ans := HistoryAnswer{Start: start}
	if r.ByTime {
		off, ts, err := be.broker.QueueOffsetForTime(r.Queue, r.Time)
		if err != nil {
			return ans, err
		}
		if ts < 0 || off >= min(r.End, hw) {
			off, ts = -1, -1
		}
		ans.Offset, ans.Timestamp = off, ts
		return ans, nil
	}
	end := min(r.End, hw)
	if r.Committed && be.txnIndex != nil {
		end = min(end, be.txnIndex.LastStable(r.Queue, hw))
	}
	if r.Offset < start {
		return ans, model.ErrOffsetOutOfRange
	}
	if r.Offset >= end {
		return ans, nil
	}
	res, err := e.Read(r.Queue, r.Offset, broker.ReadOptions{MaxBytes: max(r.MaxBytes, 1)})
	if err != nil {
		return ans, err
	}
	defer res.Release()
	out, upTo, err := encodeStored(res.Records, r.Offset, end)
	if err != nil {
		return ans, err
	}
	ans.Batches = out
	if r.Committed && upTo > r.Offset && be.txnIndex != nil {
		for _, a := range be.txnIndex.Aborted(r.Queue, r.Offset, upTo) {
			ans.Aborted = append(ans.Aborted, AbortedTxn{PID: a.ProducerID, First: a.FirstOffset})
		}
	}
	return ans, nil
}

// historyPiece is the old piece of a moved partition holding offset: its
// group and where the next piece begins; false when offset is in none.
func historyPiece(pp part, offset model.QueueOffset) (route.Piece, model.QueueOffset, bool) {
	t := pp.topic
	if len(t.Moves) == 0 {
		return route.Piece{}, 0, false
	}
	i := t.GlobalIndex(model.GroupID(pp.be.group), int(pp.index))
	if i < 0 {
		return route.Piece{}, 0, false
	}
	chain := t.Moves.Chain(t.Groups, i)
	for j := len(chain) - 2; j >= 0; j-- {
		next := chain[j+1].From
		if next == route.PieceMoving {
			continue
		}
		if offset >= chain[j].From && offset < next {
			return chain[j], next, true
		}
	}
	return route.Piece{}, 0, false
}

// fetchHistory is fetchPartition for an offset below the partition's piece
// in this group: the records of the old piece holding it.
func (s *Server) fetchHistory(ctx context.Context, pp part, offset model.QueueOffset, budget int, first, committed bool, pr *kmsg.FetchResponseTopicPartition) (int, bool, error) {
	piece, next, ok := historyPiece(pp, offset)
	if !ok || s.opts.Remote == nil {
		return 0, false, nil
	}
	if budget <= 0 && !first {
		return 0, true, nil
	}
	ans, err := s.opts.Remote.History(ctx, int(piece.Group), HistoryRead{Queue: pp.queue, Offset: offset, End: next, MaxBytes: max(budget, 1), Committed: committed})
	if err != nil {
		return 0, true, err
	}
	if piece.From == 0 {
		pr.LogStartOffset = int64(ans.Start)
	}
	if len(ans.Batches) > 0 {
		pr.RecordBatches = ans.Batches
	}
	for _, a := range ans.Aborted {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.PID, int64(a.First)
		pr.AbortedTransactions = append(pr.AbortedTransactions, at)
	}
	return len(ans.Batches), true, nil
}

// historyStart is a partition's log start: start, its piece's in this
// group, unless it moved here and its first piece still holds records.
func (s *Server) historyStart(ctx context.Context, pp part, start model.QueueOffset) (model.QueueOffset, error) {
	if len(pp.topic.Moves) == 0 || s.opts.Remote == nil {
		return start, nil
	}
	first, next, ok := historyPiece(pp, 0)
	if !ok {
		return start, nil
	}
	ans, err := s.opts.Remote.History(ctx, int(first.Group), HistoryRead{Queue: pp.queue, Offset: next, End: next})
	if err != nil {
		return 0, err
	}
	if ans.Start >= next {
		return start, nil // retention emptied it
	}
	return ans.Start, nil
}

// historyOffsetForTime looks a timestamp up in a moved partition's old
// pieces, oldest first: the first offset at or after ts there, with its
// timestamp (false: none before the partition's piece here).
func (s *Server) historyOffsetForTime(ctx context.Context, pp part, ts int64) (model.QueueOffset, int64, bool, error) {
	t := pp.topic
	if len(t.Moves) == 0 || s.opts.Remote == nil {
		return 0, -1, false, nil
	}
	i := t.GlobalIndex(model.GroupID(pp.be.group), int(pp.index))
	if i < 0 {
		return 0, -1, false, nil
	}
	chain := t.Moves.Chain(t.Groups, i)
	for j := 0; j+1 < len(chain); j++ {
		next := chain[j+1].From
		if next == route.PieceMoving || int(chain[j].Group) == pp.be.group {
			break
		}
		ans, err := s.opts.Remote.History(ctx, int(chain[j].Group), HistoryRead{Queue: pp.queue, End: next, ByTime: true, Time: ts})
		if err != nil {
			return 0, -1, false, err
		}
		if ans.Offset >= 0 && ans.Timestamp >= 0 {
			return ans.Offset, ans.Timestamp, true, nil
		}
	}
	return 0, -1, false, nil
}
