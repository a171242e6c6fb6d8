package kafka

// FindCoordinator (key 10), versions 0-4.
//
// Version notes: this node coordinates every group and transactional id;
// v4 batches keys (CoordinatorKeys) and answers one coordinator per key.

import "github.com/twmb/franz-go/pkg/kmsg"

func handleFindCoordinator(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.FindCoordinatorRequest)
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	s := rc.srv()
	host, port := s.advertised(rc.conn.nc.LocalAddr())
	if req.Version >= 4 {
		for _, k := range req.CoordinatorKeys {
			resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: s.opts.NodeID, Host: host, Port: port})
		}
		return reply{resp: resp}
	}
	resp.NodeID, resp.Host, resp.Port = s.opts.NodeID, host, port
	return reply{resp: resp}
}
