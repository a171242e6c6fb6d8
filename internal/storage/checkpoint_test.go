package storage

import (
	"testing"

	"github.com/rosettamq/rosetta/internal/storage/queueindex"
)

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add(encodeCheckpoint(checkpointData{LogPos: 4096, Queues: []queueCheckpoint{{ID: 1, State: queueindex.State{First: 0, Flushed: 10, Next: 30, Start: 5, MaxTime: 77}}}}))
	f.Add(encodeCheckpoint(checkpointData{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b)
		if err != nil {
			return
		}
		if string(encodeCheckpoint(c)) != string(b) {
			t.Fatal("re-encoding differs")
		}
	})
}
