package etcdembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// errNotMember: a member starting on an empty directory is not listed by
// the running cluster.
var errNotMember = errors.New("not a member of the running cluster")

// rejoinTimeout bounds asking the other members about their cluster.
const rejoinTimeout = 2 * time.Second

// rejoin is for a member starting with an empty directory while its
// cluster may already run: a member whose disk was replaced. Its old self
// is still a member the others wait for, and one starting afresh under
// the same name cannot take its place (its log is gone). When another
// member answers and lists this member as one that ran before, rejoin
// removes it and adds it again, and returns the cluster to join (existing
// true). When nobody answers, or the member never ran (the cluster's
// first start), it returns existing false: the member starts as one of a
// new cluster.
func rejoin(ctx context.Context, c EmbeddedConfig) (initial map[string]string, existing bool, err error) {
	var list []*etcdserverpb.Member
	var ok bool
	if c.Asked != nil {
		list, ok = c.Asked.Members, c.Asked.Answered
	} else {
		list, ok = ListMembers(ctx, c.Peers, c.ClientTLS)
	}
	if !ok {
		return nil, false, nil // no cluster answers (yet): a new one
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Peers, DialTimeout: rejoinTimeout, TLS: c.ClientTLS, Logger: zap.NewNop()})
	if err != nil {
		return nil, false, nil
	}
	defer cli.Close()
	var old uint64
	for _, m := range list {
		if slices.Contains(m.PeerURLs, c.PeerURL) {
			if m.Name == "" && m.IsLearner {
				// Added to a running cluster (a member joining): it
				// starts as the learner it was added as.
				return listedCluster(list, m.ID, c), true, nil
			}
			if m.Name == "" || len(m.ClientURLs) == 0 {
				// Never started: it joins as listed. (A member of the
				// initial cluster is listed with its name from the
				// start — the others may form the cluster before it
				// comes up — and publishes its client URLs once it
				// ran.)
				return nil, false, nil
			}
			old = m.ID
		}
	}
	if old == 0 {
		// Not a member of the running cluster: adding itself would change
		// the cluster's quorum behind its operators' backs.
		return nil, false, fmt.Errorf("%w: the running cluster does not list this member (%s); add it first (rosetta cluster member add)",
			errNotMember, c.PeerURL)
	}
	c.Logger.Warn("this etcd member's data is gone but its cluster runs: joining it again as a new member", "name", c.Name)
	// etcd refuses both changes for a while after one of the others
	// (re)connected: they are retried, the add above all, since a member
	// removed and not added again is no longer listed and would refuse
	// to start.
	if err := retryUnhealthy(ctx, func(ctx context.Context) error {
		_, err := cli.MemberRemove(ctx, old)
		return err
	}, "etcd member remove"); err != nil {
		return nil, false, err
	}
	var added *clientv3.MemberAddResponse
	if err := retryUnhealthy(ctx, func(ctx context.Context) (err error) {
		added, err = cli.MemberAdd(ctx, []string{c.PeerURL})
		return err
	}, "etcd member add"); err != nil {
		return nil, false, err
	}
	c.Logger.Info("joined the etcd cluster again as a new member", "name", c.Name)
	return listedCluster(added.Members, added.Member.ID, c), true, nil
}

// listedCluster is the initial cluster of a member joining a running one:
// the members listed, this one (self) under its name.
func listedCluster(members []*etcdserverpb.Member, self uint64, c EmbeddedConfig) map[string]string {
	initial := map[string]string{}
	for _, m := range members {
		name := m.Name
		if m.ID == self {
			name = c.Name
		}
		if name != "" && len(m.PeerURLs) > 0 {
			initial[name] = m.PeerURLs[0]
		}
	}
	return initial
}

// ListMembers lists the members of the etcd cluster behind endpoints,
// asking those that accept a connection (ok false: none answers, as
// while a cluster is being made).
func ListMembers(ctx context.Context, endpoints []string, tlsCfg *tls.Config) (members []*etcdserverpb.Member, ok bool) {
	var reachable []string
	for _, p := range endpoints {
		u, err := url.Parse(p)
		if err != nil {
			continue
		}
		if conn, err := net.DialTimeout("tcp", u.Host, 300*time.Millisecond); err == nil {
			conn.Close()
			reachable = append(reachable, p)
		}
	}
	if len(reachable) == 0 {
		return nil, false
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: reachable, DialTimeout: rejoinTimeout, TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		return nil, false
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
	defer cancel()
	list, err := cli.MemberList(lctx)
	if err != nil {
		return nil, false
	}
	return list.Members, true
}

// Listed says whether members list one at peerURL.
func Listed(members []*etcdserverpb.Member, peerURL string) bool {
	return slices.ContainsFunc(members, func(m *etcdserverpb.Member) bool { return slices.Contains(m.PeerURLs, peerURL) })
}

// ClientURLs are the client URLs members serve (none for a learner that
// has not started).
func ClientURLs(members []*etcdserverpb.Member) []string {
	var out []string
	for _, m := range members {
		out = append(out, m.ClientURLs...)
	}
	return out
}

// AddLearner adds a member at peerURL to the running etcd cluster behind
// endpoints as a learner: started with an empty directory, it joins
// (rejoin) and promotes itself once it has caught up (promoteSelf). An
// existing member at peerURL is left as it is; a cluster of most members
// already is left as it is (added false: the node will be a client).
func AddLearner(ctx context.Context, endpoints []string, tlsCfg *tls.Config, peerURL string, most int) (added bool, err error) {
	err = withMember(ctx, endpoints, tlsCfg, peerURL, func(cli *clientv3.Client, m *etcdserverpb.Member, all int) error {
		if m != nil {
			added = true
			return nil
		}
		if all >= most {
			return nil
		}
		added = true
		return retryUnhealthy(ctx, func(ctx context.Context) error {
			_, err := cli.MemberAddAsLearner(ctx, []string{peerURL})
			return err
		}, "etcd member add")
	})
	return added, err
}

// RemoveMember removes the member at peerURL from the etcd cluster behind
// endpoints (none there: nothing to do).
func RemoveMember(ctx context.Context, endpoints []string, tlsCfg *tls.Config, peerURL string) error {
	return withMember(ctx, endpoints, tlsCfg, peerURL, func(cli *clientv3.Client, m *etcdserverpb.Member, _ int) error {
		if m == nil {
			return nil
		}
		return retryUnhealthy(ctx, func(ctx context.Context) error {
			_, err := cli.MemberRemove(ctx, m.ID)
			return err
		}, "etcd member remove")
	})
}

// withMember calls fn with a client of the cluster behind endpoints and
// its member at peerURL (nil: none) and how many members it has.
func withMember(ctx context.Context, endpoints []string, tlsCfg *tls.Config, peerURL string, fn func(*clientv3.Client, *etcdserverpb.Member, int) error) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: rejoinTimeout, TLS: tlsCfg, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return fmt.Errorf("etcd member list: %w", err)
	}
	for _, m := range list.Members {
		if slices.Contains(m.PeerURLs, peerURL) {
			return fn(cli, m, len(list.Members))
		}
	}
	return fn(cli, nil, len(list.Members))
}

// retryUnhealthy retries a membership change etcd refuses while a member
// has not been connected to a majority for long (after a start or a
// failure) — for up to reconfigWait.
func retryUnhealthy(ctx context.Context, fn func(context.Context) error, what string) error {
	deadline := time.Now().Add(reconfigWait)
	for {
		actx, cancel := context.WithTimeout(ctx, reconfigAttempt)
		err := fn(actx)
		cancel()
		if err == nil || !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reconfigWait bounds retrying a membership change etcd refuses as
// unsafe for now.
const reconfigWait = 20 * time.Second

// reconfigAttempt bounds one membership change (it waits for the etcd
// cluster's quorum).
const reconfigAttempt = 5 * time.Second

// promoteSelf makes this member, started as a learner, a voting member
// once it has caught up with the leader (etcd refuses until then).
func promoteSelf(ctx context.Context, c EmbeddedConfig, id uint64) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Peers, DialTimeout: rejoinTimeout, TLS: c.ClientTLS, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
		_, err := cli.MemberPromote(pctx, id)
		cancel()
		// A promotion applied whose answer was lost (a timeout) is
		// refused as the next try's: the member votes already.
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotLearner) {
			c.Logger.Info("this etcd member is a voting member now", "name", c.Name)
			return nil
		}
		c.Logger.Debug("etcd member not promoted yet", "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member promotion: %w (last: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
