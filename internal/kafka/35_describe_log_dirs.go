package kafka

// DescribeLogDirs (key 35), versions 0-4.
//
// Version notes: one log directory (the data directory) holding every
// partition. A partition's size is what its retained records occupy in the
// shared commit log (the live-byte accounting). v4 reports the disk's
// total and usable bytes.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
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
	dir.Dir = s.cat().DataDir()
	dir.TotalBytes = -1
	dir.UsableBytes = -1
	if total, free, err := s.cat().DiskSpace(); err == nil {
		dir.TotalBytes, dir.UsableBytes = total, free
	}
	wanted := map[string]map[int32]bool{}
	for _, t := range req.Topics {
		wanted[t.Topic] = map[int32]bool{}
		for _, p := range t.Partitions {
			wanted[t.Topic][p] = true
		}
	}
	for _, t := range s.cat().Topics(false) {
		name := rc.kafkaName(t)
		if req.Topics != nil && wanted[name] == nil {
			continue
		}
		dt := kmsg.NewDescribeLogDirsResponseDirTopic()
		dt.Topic = name
		// The partitions of the groups this node serves, by their
		// number in the whole topic.
		for _, be := range s.attached() {
			bt, err := be.broker.Topic(t.Name)
			if err != nil {
				continue
			}
			_, sizes := be.broker.TopicBytes(bt)
			for i := range bt.Queues {
				p := int32(bt.GlobalIndex(model.GroupID(be.group), i))
				if req.Topics != nil && !wanted[name][p] {
					continue
				}
				part := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
				part.Partition = p
				part.Size = sizes[i]
				dt.Partitions = append(dt.Partitions, part)
			}
		}
		sort.Slice(dt.Partitions, func(i, j int) bool { return dt.Partitions[i].Partition < dt.Partitions[j].Partition })
		dir.Topics = append(dir.Topics, dt)
	}
	resp.Dirs = append(resp.Dirs, dir)
	return reply{resp: resp}
}
