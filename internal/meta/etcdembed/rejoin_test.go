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

// TestListenURL: a member named by a DNS name listens on every address.
func TestListenURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.11:2379":                          "http://127.0.0.11:2379",
		"https://rel-rosetta-0.rel-rosetta-headless:2380": "https://0.0.0.0:2380",
		"http://[::1]:2379":                               "http://[::1]:2379",
	} {
		if got := listenURL(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
