package kafka

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/model"
)

// TestNotLeaderMapping: a queue led elsewhere is NOT_LEADER_OR_FOLLOWER
// naming the current leader (KIP-951), also when wrapped.
func TestNotLeaderMapping(t *testing.T) {
	err := fmt.Errorf("append: %w", &model.NotLeaderError{Queue: 4, Leader: 2, Epoch: 9})
	if code := errorCode(err); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("code %d", code)
	}
	if leader, epoch, ok := currentLeader(err); !ok || leader != 2 || epoch != 9 {
		t.Fatalf("current leader %d epoch %d %v", leader, epoch, ok)
	}
	if _, _, ok := currentLeader(model.ErrDiskFull); ok {
		t.Fatal("a disk-full error names a leader")
	}
	for _, tc := range []struct {
		client, current int32
		want            error
	}{{-1, 0, nil}, {0, 0, nil}, {0, 1, errFencedLeaderEpoch}, {2, 1, errUnknownLeaderEpoch}} {
		if got := checkLeaderEpoch(tc.client, model.Epoch(tc.current)); got != tc.want {
			t.Fatalf("client epoch %d, current %d: %v", tc.client, tc.current, got)
		}
	}
}
