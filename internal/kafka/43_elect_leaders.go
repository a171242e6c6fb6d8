package kafka

// ElectLeaders (key 43), versions 0-2.
//
// Version notes: this node leads every partition, so a preferred or unclean
// election for a known partition is ELECTION_NOT_NEEDED and an unknown one is
// UNKNOWN_TOPIC_OR_PARTITION. A request for all partitions (null topics)
// answers with no partitions, as Kafka lists only partitions where an
// election ran or failed otherwise.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleElectLeaders(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ElectLeadersRequest)
	resp := req.ResponseKind().(*kmsg.ElectLeadersResponse)
	if !rc.authorizedCluster(security.OpAlter) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return reply{resp: resp}
	}
	for _, rt := range req.Topics {
		tr := kmsg.NewElectLeadersResponseTopic()
		tr.Topic = rt.Topic
		t, err := rc.lookupTopic(rt.Topic)
		for _, p := range rt.Partitions {
			pr := kmsg.NewElectLeadersResponseTopicPartition()
			pr.Partition = p
			pr.ErrorCode = kerr.ElectionNotNeeded.Code
			if err != nil || p < 0 || int(p) >= len(t.Queues) {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}
