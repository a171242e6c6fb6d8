package etcdembed

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestPromotedAlreadyIsKnownByType: the refusal a promotion gets once the
// member votes (a retry after an answer lost to a timeout) is recognised
// by its type, as the client returns it, not by its text.
func TestPromotedAlreadyIsKnownByType(t *testing.T) {
	got := rpctypes.Error(rpctypes.ErrGRPCMemberNotLearner) // what clientv3 turns the gRPC status into
	if !errors.Is(fmt.Errorf("promote: %w", got), rpctypes.ErrMemberNotLearner) {
		t.Fatalf("%v is not recognised as a member that votes already", got)
	}
	if errors.Is(rpctypes.Error(rpctypes.ErrGRPCLearnerNotReady), rpctypes.ErrMemberNotLearner) {
		t.Fatal("a learner not ready yet taken for a voting member")
	}
}
