package route

import (
	"slices"
	"testing"
)

// A queue's chain grows by a move begun, settles to an offset or drops the
// piece when the move is given up, and the guests of a group are the
// queues moved to it, by index.
func TestMoves(t *testing.T) {
	table := Table{0, 1, 0, 1}
	var m Moves
	m = m.With(2, Piece{Group: 1, From: PieceMoving})
	if !m.Moving(2) || m.Current(table, 2) != 0 {
		t.Fatalf("moving: %v, current %d", m.Moving(2), m.Current(table, 2))
	}
	if got := m.Settled(2, PieceMoving, 0); len(got) != 0 {
		t.Fatalf("given up: %+v", got)
	}
	m = m.Settled(2, 40, 3)
	if m.Moving(2) || m.Current(table, 2) != 1 || m.Of(2)[0].EpochBase != 3 {
		t.Fatalf("settled: %+v", m)
	}
	m = m.With(0, Piece{Group: 1, From: PieceMoving}).Settled(0, 7, 0)
	if g := m.Guests(table, 1); !slices.Equal(g, []int{0, 2}) {
		t.Fatalf("guests of group 1: %v", g)
	}
	if g := m.Guests(table, 0); len(g) != 0 {
		t.Fatalf("guests of group 0: %v", g)
	}
	chain := m.Chain(table, 2)
	if len(chain) != 2 || chain[0] != (Piece{Group: 0}) || chain[1].From != 40 {
		t.Fatalf("chain: %+v", chain)
	}
	m2 := m.With(2, Piece{Group: 2, From: PieceMoving})
	if len(m.Of(2)) != 1 || len(m2.Of(2)) != 2 {
		t.Fatal("With changed the moves it was called on")
	}
}
