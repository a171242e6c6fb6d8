package kafka

// ElectLeaders (key 43), versions 0-2.
//
// Version notes: on a single node this node leads every partition, so an
// election for a known partition is ELECTION_NOT_NEEDED. In a cluster
// every partition lives in the one replication group, whose preferred
// leader is the first replica: a preferred election when another node
// leads moves the group's leadership there (every partition with it) and
// answers once it moved; PREFERRED_LEADER_NOT_AVAILABLE when that replica
// is not in sync. An unclean election is never needed while a leader
// exists (ELIGIBLE_LEADERS_NOT_AVAILABLE otherwise: Raft elects, not the
// request). Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION; a request
// for all partitions (null topics) lists every partition when an election
// ran, and none otherwise, as Kafka lists only partitions where one ran or
// failed.

import (
	"context"
	"slices"
	"time"

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
	s := rc.conn.s
	// One election per replication group, run once whichever partitions
	// of it are named.
	outcomes := map[int]int16{}
	outcome := func(g int) int16 {
		if code, ok := outcomes[g]; ok {
			return code
		}
		code := s.electPreferred(rc.ctx(), req, g)
		outcomes[g] = code
		return code
	}
	topics := req.Topics
	if topics == nil {
		for _, t := range s.cat().Topics(false) {
			rt := kmsg.NewElectLeadersRequestTopic()
			rt.Topic = t.Name.Short()
			for i := range t.All {
				if outcome(int(t.GroupOf(i))) != kerr.ElectionNotNeeded.Code {
					rt.Partitions = append(rt.Partitions, int32(i))
				}
			}
			if len(rt.Partitions) > 0 {
				topics = append(topics, rt)
			}
		}
	}
	for _, rt := range topics {
		tr := kmsg.NewElectLeadersResponseTopic()
		tr.Topic = rt.Topic
		t, err := rc.lookupTopic(rt.Topic)
		for _, p := range rt.Partitions {
			pr := kmsg.NewElectLeadersResponseTopicPartition()
			pr.Partition = p
			if err != nil || p < 0 || int(p) >= len(t.All) {
				pr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			} else {
				pr.ErrorCode = outcome(int(t.GroupOf(int(p))))
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	return reply{resp: resp}
}

// electPreferred runs the election req asks for for one replication group
// and returns the error code its partitions answer with (0: leadership
// moved to the preferred replica, the group's first).
func (s *Server) electPreferred(ctx context.Context, req *kmsg.ElectLeadersRequest, group int) int16 {
	if s.clusterView() == nil {
		return kerr.ElectionNotNeeded.Code
	}
	v := s.groupView(group)
	if len(v.Replicas) == 0 {
		return kerr.ElectionNotNeeded.Code
	}
	if req.ElectionType == 1 { // unclean
		if v.Leader > 0 {
			return kerr.ElectionNotNeeded.Code
		}
		return kerr.EligibleLeadersNotAvailable.Code
	}
	preferred := v.Replicas[0]
	switch {
	case v.Leader == preferred:
		return kerr.ElectionNotNeeded.Code
	case !slices.Contains(v.ISR, preferred) || s.opts.Elect == nil:
		return kerr.PreferredLeaderNotAvailable.Code
	}
	timeout := time.Duration(req.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > 30*time.Second {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := s.opts.Elect(ctx, group, preferred); err != nil {
		if ctx.Err() != nil {
			return kerr.RequestTimedOut.Code
		}
		return kerr.PreferredLeaderNotAvailable.Code
	}
	return 0
}
