package kafka

// DescribeCluster (key 60), versions 0-1.
//
// Version notes: every node (one on a single node); the controller is the
// replication group's leader. v1's endpoint
// type is "brokers".

import "github.com/twmb/franz-go/pkg/kmsg"

func handleDescribeCluster(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	s := rc.srv()
	resp.ClusterID = s.opts.ClusterID
	resp.ControllerID = s.controller()
	resp.EndpointType = 1
	resp.ClusterAuthorizedOperations = -2147483648
	for _, ba := range s.brokers(rc.conn) {
		b := kmsg.NewDescribeClusterResponseBroker()
		b.NodeID, b.Host, b.Port = ba.id, ba.host, ba.port
		resp.Brokers = append(resp.Brokers, b)
	}
	return reply{resp: resp}
}
