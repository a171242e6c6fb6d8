package kafka

// Share sessions (KIP-932): a share group member's session with a
// partition leader, opened by a ShareFetch with epoch 0, carried on with
// each next epoch, closed by epoch -1 or when its connection ends. The
// session holds the partitions the member fetches (a ShareFetch names only
// what changed); closing it releases the records the member still holds of
// them, which other members then acquire at once.

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/rosettamq/rosetta/internal/broker/pop"
	"github.com/rosettamq/rosetta/internal/broker/security"
	"github.com/rosettamq/rosetta/internal/model"
)

// shareKey names a share session: one per group member and node.
type shareKey struct{ group, member string }

// sharePart is a partition of a share session.
type sharePart struct {
	topic     [16]byte
	partition int32
}

// shareSession is one member's session with this node.
type shareSession struct {
	key    shareKey
	holder uint64
	mu     sync.Mutex // one request of the session at a time
	epoch  int32      // the next request's
	parts  map[sharePart]struct{}
	order  []sharePart          // parts in the order they joined
	conn   atomic.Pointer[conn] // the connection of its latest request
}

// shareSessions are the node's share sessions.
type shareSessions struct {
	mu sync.Mutex
	m  map[shareKey]*shareSession
}

func newShareSessions() *shareSessions { return &shareSessions{m: map[shareKey]*shareSession{}} }

// shareHolder is the holder a member's acquisitions are recorded under.
func shareHolder(group, member string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(group))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(member))
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// sessionError is a share session request's top-level error.
type sessionError struct{ code int16 }

// open finds or makes the session a request of epoch names, locked; a
// session replaced by a new one (epoch 0 again) is returned as old to be
// released. closing: epoch -1, the session is gone once answered.
func (ss *shareSessions) open(c *conn, group, member string, epoch int32) (sess, old *shareSession, closing bool, serr *sessionError) {
	k := shareKey{group, member}
	ss.mu.Lock()
	cur := ss.m[k]
	switch epoch {
	case 0:
		sess = &shareSession{key: k, holder: shareHolder(group, member), epoch: 1, parts: map[sharePart]struct{}{}}
		sess.conn.Store(c)
		ss.m[k] = sess
		ss.mu.Unlock()
		sess.mu.Lock()
		return sess, cur, false, nil
	case -1:
		if cur == nil {
			ss.mu.Unlock()
			return nil, nil, false, &sessionError{kerr.ShareSessionNotFound.Code}
		}
		delete(ss.m, k)
		ss.mu.Unlock()
		cur.mu.Lock()
		return cur, nil, true, nil
	}
	ss.mu.Unlock()
	if cur == nil {
		return nil, nil, false, &sessionError{kerr.ShareSessionNotFound.Code}
	}
	cur.mu.Lock()
	if cur.epoch != epoch {
		cur.mu.Unlock()
		return nil, nil, false, &sessionError{kerr.InvalidShareSessionEpoch.Code}
	}
	cur.epoch = epoch + 1
	if cur.epoch <= 0 {
		cur.epoch = 1
	}
	cur.conn.Store(c)
	return cur, nil, false, nil
}

// add puts a partition in the session.
func (sess *shareSession) add(p sharePart) {
	if _, ok := sess.parts[p]; !ok {
		sess.parts[p] = struct{}{}
		sess.order = append(sess.order, p)
	}
}

// forget takes partitions out of the session; it returns those that were
// in it (their held records are to be released).
func (sess *shareSession) forget(ps []sharePart) []sharePart {
	var gone []sharePart
	for _, p := range ps {
		if _, ok := sess.parts[p]; ok {
			delete(sess.parts, p)
			gone = append(gone, p)
		}
	}
	if len(gone) > 0 {
		kept := sess.order[:0]
		for _, p := range sess.order {
			if _, ok := sess.parts[p]; ok {
				kept = append(kept, p)
			}
		}
		sess.order = kept
	}
	return gone
}

// closeConn ends the sessions of a connection that closed, releasing what
// their members hold.
func (s *Server) closeShareSessions(c *conn) {
	ss := s.shares
	ss.mu.Lock()
	var gone []*shareSession
	for k, sess := range ss.m {
		if sess.conn.Load() == c {
			delete(ss.m, k)
			gone = append(gone, sess)
		}
	}
	ss.mu.Unlock()
	for _, sess := range gone {
		sess.mu.Lock()
		s.releaseShare(sess, sess.order)
		sess.mu.Unlock()
	}
}

// releaseShare releases what a session's member holds of some partitions.
func (s *Server) releaseShare(sess *shareSession, parts []sharePart) {
	if len(parts) == 0 || s.cat() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range parts {
		pp, err := s.sharePartition(p)
		if err != nil {
			continue // led elsewhere now: the locks end there
		}
		if n, err := pp.be.pop.ReleaseHolder(ctx, sess.key.group, pp.queue, sess.holder); err != nil {
			s.log.Warn("share session records not released; they come back when their locks end",
				"group", sess.key.group, "member", sess.key.member, "queue", pp.queue, "err", err)
		} else if n > 0 {
			s.log.Debug("share session ended: records released", "group", sess.key.group, "member", sess.key.member, "queue", pp.queue, "records", n)
		}
	}
}

// sharePartition is a session partition's backend here (its leader's);
// errors as a fetch's: unknown topic id, not the leader, no POP engine.
func (s *Server) sharePartition(p sharePart) (part, error) {
	t, err := s.cat().TopicByID(p.topic)
	if err != nil {
		return part{}, errUnknownTopicID
	}
	pp, err := s.partition(t, p.partition)
	if err != nil {
		return part{}, err
	}
	if pp.be.pop == nil {
		return part{}, &kafkaCodeError{code: kerr.UnsupportedVersion.Code, msg: "share groups are not served here"}
	}
	return pp, nil
}

// ackBatches converts a request's acknowledgement batches; renew (type 4)
// is valid only where the request says it renews.
func ackBatches(n int, get func(i int) (first, last int64, types []int8), renew bool) ([]pop.AckBatch, error) {
	out := make([]pop.AckBatch, 0, n)
	for i := range n {
		first, last, types := get(i)
		b := pop.AckBatch{First: model.QueueOffset(first), Last: model.QueueOffset(last), Types: make([]pop.AckType, len(types))}
		for j, t := range types {
			if t < 0 || t > int8(pop.AckRenew) || t == int8(pop.AckRenew) && !renew {
				return nil, &kafkaCodeError{code: kerr.InvalidRequest.Code, msg: "invalid acknowledge type"}
			}
			b.Types[j] = pop.AckType(t)
		}
		out = append(out, b)
	}
	return out, nil
}

// shareMember checks a share request's group and member (both required)
// and the right to read the group; a non-zero code refuses the request.
func (rc *reqCtx) shareMember(groupID, memberID *string) (group, member string, code int16, msg string) {
	if groupID == nil || *groupID == "" || memberID == nil || *memberID == "" {
		return "", "", kerr.InvalidRequest.Code, "group id and member id are required"
	}
	if !rc.allowedGroup(*groupID, security.OpRead) {
		return "", "", kerr.GroupAuthorizationFailed.Code, ""
	}
	return *groupID, *memberID, 0, ""
}
