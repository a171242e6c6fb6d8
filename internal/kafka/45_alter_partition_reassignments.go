package kafka

// AlterPartitionReassignments (key 45), versions 0-1.
//
// Version notes: a single node holds the only replica of every partition. A
// reassignment to exactly this node completes at once; one naming any other
// broker, an empty list or a repeated broker is INVALID_REPLICA_ASSIGNMENT;
// cancelling (null replicas) is NO_REASSIGNMENT_IN_PROGRESS, since none ever
// is. Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleAlterPartitionReassignments(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.AlterPartitionAssignmentsRequest)
	resp := req.ResponseKind().(*kmsg.AlterPartitionAssignmentsResponse)
	resp.AllowReplicationFactorChange = req.AllowReplicationFactorChange
	s := rc.srv()
	if !rc.authorizedCluster(security.OpAlter) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return reply{resp: resp}
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewAlterPartitionAssignmentsResponseTopic()
		tr.Topic = rt.Topic
		t, err := rc.lookupTopic(rt.Topic)
		for _, rp := range rt.Partitions {
			pr := kmsg.NewAlterPartitionAssignmentsResponseTopicPartition()
			pr.Partition = rp.Partition
			switch {
			case err != nil || rp.Partition < 0 || int(rp.Partition) >= len(t.All):
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case rp.Replicas == nil:
				pr.ErrorCode = kerr.NoReassignmentInProgress.Code
			case len(rp.Replicas) != 1 || rp.Replicas[0] != s.opts.NodeID:
				pr.ErrorCode = kerr.InvalidReplicaAssignment.Code
				pr.ErrorMessage = strp("this single node is the only broker: replicas must be exactly its id")
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
