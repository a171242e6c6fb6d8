package kafka

// DescribeLogDirs (key 35), versions 0-4.
//
// Version notes: one log directory (the data directory) holding every
// partition. A partition's size is what its retained records occupy in the
// shared commit log (the live-byte accounting). v4 reports the disk's
// total and usable bytes.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
)

func handleDescribeLogDirs(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.DescribeLogDirsRequest)
	resp := req.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	s := rc.srv()
	if !rc.authorizedCluster(security.OpDescribe) {
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code // v3+; older versions see no directories
		return reply{resp: resp}
	}
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = s.broker.DataDir()
	dir.TotalBytes = -1
	dir.UsableBytes = -1
	if total, free, err := s.broker.DiskSpace(); err == nil {
		dir.TotalBytes, dir.UsableBytes = total, free
	}
	wanted := map[string]map[int32]bool{}
	for _, t := range req.Topics {
		wanted[t.Topic] = map[int32]bool{}
		for _, p := range t.Partitions {
			wanted[t.Topic][p] = true
		}
	}
	for _, t := range s.broker.Topics(false) {
		name := rc.kafkaName(t)
		if req.Topics != nil && wanted[name] == nil {
			continue
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = name
		_, sizes := s.broker.TopicBytes(t)
		for i := range t.Queues {
			if req.Topics != nil && !wanted[name][int32(i)] {
				continue
			}
			part := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			part.Partition = int32(i)
			part.Size = sizes[i]
			dt.Partitions = append(dt.Partitions, part)
		}
		dir.Topics = append(dir.Topics, dt)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return reply{resp: resp}
}
