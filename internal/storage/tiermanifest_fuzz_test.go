package storage

import (
	"testing"

	"github.com/rosettamq/rosetta/internal/model"
)

// FuzzTierManifest feeds arbitrary bytes to the manifest's decoders (a tier
// commit record's payload, a checkpoint section): refused or decoded, never
// a crash, and what decodes encodes back the same.
func FuzzTierManifest(f *testing.F) {
	s := &TieredSegment{Key: "g1/00000000000000000001-3", Term: 3, Base: 1 << 20, End: 2 << 20, FirstIndex: 1, LastIndex: 90,
		Size: 1<<20 + 500, IndexLen: 400, IndexCRC: 7, DataCRC: 9, MaxStoreTime: 1234,
		Queues: []TieredQueue{{Queue: 4, First: 10, End: 20, MaxTimestamp: 99}}}
	f.Add(tierCommitPayload(s))
	var m tierManifest
	m.add(s)
	sec, _ := m.Capture()
	f.Add(sec)
	f.Add(tierDropPayload([]model.LogPos{1 << 20}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m tierManifest
		if m.apply(b) == nil {
			got := m.list()
			if len(got) != 1 {
				t.Fatalf("applied one commit, manifest has %d", len(got))
			}
			if again := tierCommitPayload(got[0]); string(again) != string(b[:len(again)]) {
				t.Fatal("a decoded commit encodes differently")
			}
			_ = m.find(got[0].Base)
		}
		m.add(s)
		_ = m.drop(b)
		var r tierManifest
		if r.Restore(b) == nil {
			for _, s := range r.list() {
				if r.find(s.Base) != s && s.End > s.Base {
					t.Fatalf("segment at %d not found", s.Base)
				}
			}
			_ = r.find(model.LogPos(len(b)))
		}
	})
}
