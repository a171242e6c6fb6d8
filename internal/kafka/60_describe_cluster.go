package kafka

// DescribeCluster (key 60), versions 0-1.
//
// Version notes: one broker, which is also the controller. v1's endpoint
// type is "brokers".

import "github.com/twmb/franz-go/pkg/kmsg"

func handleDescribeCluster(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeClusterRequest)
	resp := req.ResponseKind().(*kmsg.DescribeClusterResponse)
	s := rc.srv()
	host, port := s.advertised(rc.conn)
	resp.ClusterID = s.opts.ClusterID
	resp.ControllerID = s.opts.NodeID
	resp.EndpointType = 1
	resp.ClusterAuthorizedOperations = -2147483648
	b := kmsg.NewDescribeClusterResponseBroker()
	b.NodeID, b.Host, b.Port = s.opts.NodeID, host, port
	resp.Brokers = []kmsg.DescribeClusterResponseBroker{b}
	return reply{resp: resp}
}
