package route

import (
	"slices"

	"github.com/rosettamq/rosetta/internal/model"
)

// Piece is one stretch of a moved queue: its records from offset From on
// (up to the next piece's From) live in group Group. EpochBase is added to
// that group's leader epochs for the queue, so the epochs Kafka clients see
// only grow across a move. A queue's first piece — offset 0 on, in the
// group its table entry names (its home) — is implied.
type Piece struct {
	Group     model.GroupID     `json:"group"`
	From      model.QueueOffset `json:"from"` // PieceMoving while the move is under way
	EpochBase model.Epoch       `json:"epoch_base,omitempty"`
}

// PieceMoving is the From of a piece whose group does not take the queue
// yet: the previous group is sealed and the offset it ended at not yet
// recorded.
const PieceMoving model.QueueOffset = -1

// Move is the pieces of one queue (topic-wide index Queue) after its
// first, oldest first.
type Move struct {
	Queue  int     `json:"queue"`
	Pieces []Piece `json:"pieces"`
}

// Moves are a topic's moved queues: a queue moves without copying its
// history, so it becomes a chain of (group, from-offset) pieces. The
// table keeps each queue's home group, which RocketMQ clients go on
// naming it by; appends go to the last piece's group.
type Moves []Move

// Of is queue i's pieces after its first (nil when it never moved).
func (m Moves) Of(i int) []Piece {
	for _, mv := range m {
		if mv.Queue == i {
			return mv.Pieces
		}
	}
	return nil
}

// Current is the group queue i's appends go to: its last piece whose move
// finished, else its home in t.
func (m Moves) Current(t Table, i int) model.GroupID {
	ps := m.Of(i)
	for j := len(ps) - 1; j >= 0; j-- {
		if ps[j].From != PieceMoving {
			return ps[j].Group
		}
	}
	return t.Group(i)
}

// Moving reports whether queue i is moving now (sealed where it was, not
// yet taken where it goes).
func (m Moves) Moving(i int) bool {
	ps := m.Of(i)
	return len(ps) > 0 && ps[len(ps)-1].From == PieceMoving
}

// Chain is queue i's pieces, its home first.
func (m Moves) Chain(t Table, i int) []Piece {
	return append([]Piece{{Group: t.Group(i)}}, m.Of(i)...)
}

// With returns the moves with queue i given one more piece (a move begun);
// m is not changed.
func (m Moves) With(i int, p Piece) Moves {
	out := make(Moves, 0, len(m)+1)
	found := false
	for _, mv := range m {
		if mv.Queue == i {
			mv.Pieces = append(append([]Piece(nil), mv.Pieces...), p)
			found = true
		}
		out = append(out, mv)
	}
	if !found {
		out = append(out, Move{Queue: i, Pieces: []Piece{p}})
	}
	return out
}

// Settled returns the moves with queue i's last piece, a move under way,
// taken from offset from with epoch base base (done) or dropped (given up,
// from PieceMoving); m is not changed.
func (m Moves) Settled(i int, from model.QueueOffset, base model.Epoch) Moves {
	out := make(Moves, 0, len(m))
	for _, mv := range m {
		if mv.Queue == i && len(mv.Pieces) > 0 && mv.Pieces[len(mv.Pieces)-1].From == PieceMoving {
			ps := append([]Piece(nil), mv.Pieces...)
			if from == PieceMoving {
				ps = ps[:len(ps)-1]
			} else {
				ps[len(ps)-1].From, ps[len(ps)-1].EpochBase = from, base
			}
			if len(ps) == 0 {
				continue
			}
			mv.Pieces = ps
		}
		out = append(out, mv)
	}
	return out
}

// Guests are the queues (topic-wide indexes, in order) whose appends go to
// group g but whose home is another group: queues moved to g.
func (m Moves) Guests(t Table, g model.GroupID) []int {
	var out []int
	for _, mv := range m {
		if m.Current(t, mv.Queue) == g && t.Group(mv.Queue) != g {
			out = append(out, mv.Queue)
		}
	}
	slices.Sort(out) // recorded in the order queues first moved
	return out
}
