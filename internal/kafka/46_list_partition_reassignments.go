package kafka

// ListPartitionReassignments (key 46), version 0.
//
// Version notes: reassignments on a single node complete at once, so none is
// ever ongoing and the answer lists no partitions.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleListPartitionReassignments(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListPartitionReassignmentsRequest)
	resp := req.ResponseKind().(*kmsg.ListPartitionReassignmentsResponse)
	if !rc.authorizedCluster(security.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	}
	return reply{resp: resp}
}
