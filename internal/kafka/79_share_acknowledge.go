package kafka

// ShareAcknowledge (key 79), versions 1-2: a share group member settles
// records it holds without fetching (KIP-932).
//
// Version notes: the request belongs to the member's share session, which
// must be open (epoch 0 is INVALID_SHARE_SESSION_EPOCH: a session opens
// with a ShareFetch); -1 closes it after the acknowledgements and releases
// what the member still holds. Each partition's acknowledgements are settled
// all or none, as in ShareFetch (INVALID_RECORD_STATE for an offset the
// member does not hold). v2 renews locks (type 4) when IsRenewAck is set and
// answers AcquisitionLockTimeoutMillis.

import (
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func handleShareAcknowledge(rc *reqCtx, kreq kmsg.Request) reply {
	req := kreq.(*kmsg.ShareAcknowledgeRequest)
	resp := req.ResponseKind().(*kmsg.ShareAcknowledgeResponse)
	s := rc.srv()
	fail := func(code int16, msg string) reply {
		resp.ErrorCode = code
		if msg != "" {
			resp.ErrorMessage = &msg
		}
		return reply{resp: resp}
	}
	group, member, code, msg := rc.shareMember(req.GroupID, req.MemberID)
	if code != 0 {
		return fail(code, msg)
	}
	if req.ShareSessionEpoch == 0 {
		return fail(kerr.InvalidShareSessionEpoch.Code, "a share session opens with a ShareFetch")
	}
	sess, _, closing, serr := s.shares.open(rc.conn, group, member, req.ShareSessionEpoch)
	if serr != nil {
		return fail(serr.code, "")
	}
	defer sess.mu.Unlock()
	set := shareSettingsOf(s.cat(), group)
	if req.Version >= 2 {
		resp.AcquisitionLockTimeoutMillis = int32(set.lock / time.Millisecond)
	}
	renew := req.Version >= 2 && req.IsRenewAck
	for _, rt := range req.Topics {
		tr := kmsg.NewShareAcknowledgeResponseTopic()
		tr.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			pr := kmsg.NewShareAcknowledgeResponseTopicPartition()
			pr.Partition = rp.Partition
			pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = -1, -1
			bs := rp.AcknowledgementBatches
			batches, err := ackBatches(len(bs), func(i int) (int64, int64, []int8) {
				return bs[i].FirstOffset, bs[i].LastOffset, bs[i].AcknowledgeTypes
			}, renew && set.renew)
			if err == nil {
				err = rc.settleShare(sess, sharePart{rt.TopicID, rp.Partition}, batches, set.lock)
			}
			if err != nil {
				pr.ErrorCode, pr.ErrorMessage = errorCode(err), errorMessage(err)
				if leader, epoch, ok := currentLeader(err); ok {
					pr.CurrentLeader.LeaderID, pr.CurrentLeader.LeaderEpoch = leader, epoch
				}
			}
			tr.Partitions = append(tr.Partitions, pr)
		}
		resp.Topics = append(resp.Topics, tr)
	}
	if closing {
		s.releaseShare(sess, sess.order)
	}
	return reply{resp: resp}
}
