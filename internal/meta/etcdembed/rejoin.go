package etcdembed

import (
	"context"
	"net"
	"net/url"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

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
	var reachable []string
	for _, p := range c.Peers {
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
		return nil, false, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: reachable, DialTimeout: rejoinTimeout, TLS: c.ClientTLS, Logger: zap.NewNop()})
	if err != nil {
		return nil, false, nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, rejoinTimeout)
	defer cancel()
	list, err := cli.MemberList(ctx)
	if err != nil {
		return nil, false, nil // no cluster answers (yet): a new one
	}
	var old uint64
	for _, m := range list.Members {
		if slices.Contains(m.PeerURLs, c.PeerURL) {
			if m.Name == "" {
				return nil, false, nil // never started: it joins as listed
			}
			old = m.ID
		}
	}
	c.Logger.Warn("this etcd member's data is gone but its cluster runs: joining it again as a new member", "name", c.Name)
	if old != 0 {
		if _, err := cli.MemberRemove(ctx, old); err != nil {
			return nil, false, err
		}
	}
	added, err := cli.MemberAdd(ctx, []string{c.PeerURL})
	if err != nil {
		return nil, false, err
	}
	initial = map[string]string{}
	for _, m := range added.Members {
		name := m.Name
		if m.ID == added.Member.ID {
			name = c.Name
		}
		if name != "" && len(m.PeerURLs) > 0 {
			initial[name] = m.PeerURLs[0]
		}
	}
	return initial, true, nil
}
