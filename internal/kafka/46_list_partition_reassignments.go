package kafka

// ListPartitionReassignments (key 46), version 0.
//
// Version notes: reassignments on a single node complete at once, so none is
// ever ongoing and the answer lists no partitions.

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleListPartitionReassignments(_ *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ListPartitionReassignmentsRequest)
	return reply{resp: req.ResponseKind()}
}
