// Package etcdembed runs an etcd member inside a node, for clusters that
// keep their metadata without an external etcd.
package etcdembed

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/rosettamq/rosetta/internal/meta"
)

// EmbeddedConfig configures the etcd member a node runs inside itself.
type EmbeddedConfig struct {
	Name      string // this member's name in InitialCluster
	Dir       string // its data directory
	ClientURL string // e.g. http://127.0.0.11:2379
	PeerURL   string // e.g. http://127.0.0.11:2380
	// InitialCluster names every member's peer URL (this one's included);
	// it is read only when the member starts with an empty directory.
	InitialCluster map[string]string
	ClusterToken   string
	// TLSCA, TLSCert and TLSKey (PEM files), when set, make the member
	// serve peers and clients over TLS and require their certificates be
	// signed by TLSCA (its URLs are then https).
	TLSCA, TLSCert, TLSKey string
	Logger                 *slog.Logger
	StartTimeout           time.Duration // 60 s when zero
	// Peers are the other members' client URLs and ClientTLS how to reach
	// them: a member starting with an empty directory asks them whether
	// it is rejoining a running cluster (rejoin).
	Peers     []string
	ClientTLS *tls.Config
	// Asked, when set, is what Peers answered a moment ago (ListMembers),
	// which the caller asked already: rejoin takes it instead of asking
	// again — a cluster being made answers nothing, and asking waits out
	// a timeout.
	Asked *PeersAnswer
}

// PeersAnswer is what ListMembers returned.
type PeersAnswer struct {
	Members  []*etcdserverpb.Member
	Answered bool
}

// listenURL is the URL etcd listens on for an advertised one: the same when
// its host is an IP address, every address on its port otherwise.
func listenURL(advertised string) string {
	u, err := url.Parse(advertised)
	if err != nil || net.ParseIP(u.Hostname()) != nil {
		return advertised
	}
	u.Host = net.JoinHostPort("0.0.0.0", u.Port())
	return u.String()
}

// Embedded is a running etcd member.
type Embedded struct {
	etcd   *embed.Etcd
	client string
	once   sync.Once
}

// StartEmbedded starts an etcd member and waits until it serves (it joins
// its cluster, which needs a majority of InitialCluster up).
func StartEmbedded(ctx context.Context, c EmbeddedConfig) (*Embedded, error) {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	var err error
	urls := func(s string) []url.URL {
		u, perr := url.Parse(s)
		if perr != nil {
			err = fmt.Errorf("embedded etcd: url %q: %w", s, perr)
			return nil
		}
		return []url.URL{*u}
	}
	// etcd listens on IP addresses only: a member named by a DNS name (a
	// StatefulSet pod's) listens on every address and advertises the name.
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = urls(listenURL(c.ClientURL)), urls(c.ClientURL)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = urls(listenURL(c.PeerURL)), urls(c.PeerURL)
	if err != nil {
		return nil, err
	}
	existing := false
	if _, err := os.Stat(filepath.Join(c.Dir, "member")); err != nil && len(c.Peers) > 0 {
		initial, ok, err := rejoin(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("embedded etcd: rejoin the cluster: %w", err)
		}
		if ok {
			c.InitialCluster, existing = initial, true
		}
	}
	names := make([]string, 0, len(c.InitialCluster))
	for name := range c.InitialCluster {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + c.InitialCluster[name]
	}
	cfg.InitialCluster = strings.Join(parts, ",")
	if c.TLSCA != "" {
		info := transport.TLSInfo{CertFile: c.TLSCert, KeyFile: c.TLSKey, TrustedCAFile: c.TLSCA, ClientCertAuth: true}
		cfg.PeerTLSInfo, cfg.ClientTLSInfo = info, info
	}
	cfg.InitialClusterToken = c.ClusterToken
	cfg.ClusterState = embed.ClusterStateFlagNew
	if _, err := os.Stat(filepath.Join(c.Dir, "member")); err == nil || existing {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	// Fast failure detection on one machine or one rack: 100 ms heartbeats,
	// 1 s elections (etcd's defaults), history compacted hourly.
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = embed.CompactorModePeriodic, "1h"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(meta.ZapLogger(c.Logger.With("component", "etcd")))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	t := time.NewTimer(c.StartTimeout)
	defer t.Stop()
	select {
	case <-e.Server.ReadyNotify():
		if e.Server.IsLearner() {
			pctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
			err := promoteSelf(pctx, c, uint64(e.Server.MemberID()))
			cancel()
			if err != nil {
				e.Close()
				return nil, err
			}
		}
		return &Embedded{etcd: e, client: c.ClientURL}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-t.C:
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after %v (are a majority of %v up?)", c.StartTimeout, names)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
}

// Endpoint is the member's client URL.
func (e *Embedded) Endpoint() string { return e.client }

// HandOffLeadership moves etcd's leadership to another voting member if
// this one leads, and waits for the move (a stopping node does this
// before anything else that others then do with etcd, so that their
// requests never meet the leader change: a proposal lost in one waits for
// etcd's request timeout, 7 s).
func (e *Embedded) HandOffLeadership() error {
	if e.etcd.Server == nil {
		return nil
	}
	return e.etcd.Server.TryTransferLeadershipOnShutdown()
}

// Close stops the member: its server first (handing its etcd leadership to
// another member and closing its store), then its listeners. Closing those
// waits for the client streams other members' clients hold to it
// (watches, lease keep-alives) for etcd's request timeout, 7 s, before
// cutting them; Close waits for that at most closeWait and leaves the rest
// to finish on its own (nothing of the member's data is open by then), so
// a stopping node exits promptly.
func (e *Embedded) Close() {
	e.once.Do(func() {
		if e.etcd.Server != nil {
			e.etcd.Server.Stop()
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.etcd.Close()
		}()
		select {
		case <-done:
		case <-time.After(closeWait):
		}
	})
}

// closeWait bounds how long Close waits for the member's listeners to
// close once its server has stopped: what they still wait for are streams
// of other members' clients to a server that answers no more, which those
// clients give up on by themselves.
const closeWait = 250 * time.Millisecond
