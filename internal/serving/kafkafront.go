package serving

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rosettamq/rosetta/internal/broker"
	"github.com/rosettamq/rosetta/internal/kafka"
	"github.com/rosettamq/rosetta/internal/member/relay"
	"github.com/rosettamq/rosetta/internal/task"
)

// kafkaFront is a cluster member's Kafka front-end: one server for the
// member that answers for the groups it leads — their partitions, and the
// consumer groups and transactional ids that hash to them — attached as
// each group's term starts and detached as it ends. While the member leads
// no group, its Kafka listeners relay connections to group 0's leader.
// When its last group goes, it keeps answering for standbyServe first —
// NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR and metadata from what it last
// knew — so clients look the new leaders up at once, also when it was cut
// off from the others (a relay would wait for a leader it cannot reach).
type kafkaFront struct {
	n      *Node
	srv    *kafka.Server
	routes []*listenerRoute
	ctx    context.Context

	mu       sync.Mutex
	attached int
	serving  bool
	standby  *time.Timer // stops serving once no group came back
	cancel   context.CancelFunc
	g        *errgroup.Group
}

// standbyServe is how long a member that lost its last group keeps
// answering Kafka clients itself before it relays them again.
const standbyServe = 10 * time.Second

// newKafkaFront builds the member's Kafka server over its Kafka routes
// (nil when it has no Kafka listener).
func (n *Node) newKafkaFront(ctx context.Context, routes []*listenerRoute, budget *task.ByteBudget) *kafkaFront {
	if len(routes) == 0 {
		return nil
	}
	opts := n.kafkaOptions(budget)
	groups := n.Member.Groups()
	opts.Groups = len(groups)
	opts.LogCopy = func(g int) *broker.LogCopy {
		if g < 0 || g >= len(groups) {
			return nil
		}
		r := groups[g].Hosted()
		if r == nil {
			return nil
		}
		return broker.NewLogCopy(r.Engine, n.log)
	}
	// Groups may be added and queues moved to them whatever the
	// cluster was made with: a member always reaches the others.
	opts.Remote = kafkaRemote{n}
	f := &kafkaFront{n: n, srv: kafka.NewServer(opts), routes: routes, ctx: ctx}
	n.kafkaServer.Store(f.srv)
	return f
}

// attach serves a group's stack; the first attached group starts the
// listeners' servers.
func (f *kafkaFront) attach(gid int, st *Stack) error {
	if f == nil {
		return nil
	}
	f.srv.Attach(gid, kafka.Backend{Broker: st.Broker, Groups: st.Groups, Producers: st.Parts.Producers, Transactions: st.Txns, Pop: st.Pop})
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attached++
	if f.standby != nil {
		f.standby.Stop()
		f.standby = nil
	}
	if f.serving {
		return nil
	}
	sctx, cancel := context.WithCancel(f.ctx)
	g, gctx := errgroup.WithContext(sctx)
	cls := make([]*relay.Listener, len(f.routes))
	for i, rt := range f.routes {
		cl := relay.NewListener(rt.ep.Raw.Addr())
		l, err := f.n.TLS(rt.ep.Name, cl, rt.ep.TLS, rt.ep.ALPN...)
		if err != nil {
			cancel()
			f.attached--
			f.srv.Detach(gid)
			return err
		}
		lis := *rt.ep.Kafka
		g.Go(func() error { return f.srv.ServeListener(gctx, l, lis) })
		cls[i] = cl
	}
	for i, rt := range f.routes {
		rt.Serve(cls[i])
	}
	f.cancel, f.g, f.serving = cancel, g, true
	// Connections relayed to group 0's leader while this member led no
	// group end (or, if nothing was answered on them, are served here):
	// clients reach this member for the partitions it now leads.
	f.n.Member.KafkaRelays().CloseUpstreams()
	return nil
}

// detach stops serving a group; standbyServe after the last one the
// listeners' servers stop (their connections finish what they read, and
// new ones relay), unless a group came back meanwhile.
func (f *kafkaFront) detach(gid int) {
	if f == nil {
		return
	}
	f.srv.Detach(gid)
	f.mu.Lock()
	f.attached--
	if f.attached > 0 || !f.serving {
		f.mu.Unlock()
		return
	}
	if f.ctx.Err() != nil { // the member stops
		g := f.stopLocked()
		f.mu.Unlock()
		f.wait(g)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(standbyServe, func() {
		f.mu.Lock()
		var g *errgroup.Group
		if f.standby == t && f.attached == 0 && f.serving {
			f.standby = nil
			g = f.stopLocked()
		}
		f.mu.Unlock()
		f.wait(g)
	})
	f.standby = t
	f.mu.Unlock()
}

// stopLocked stops the listeners' servers (f.mu is held) and returns what
// to wait for once it is released.
func (f *kafkaFront) stopLocked() *errgroup.Group {
	f.serving = false
	for _, rt := range f.routes {
		if cl := rt.Stop(); cl != nil {
			cl.Close()
		}
	}
	f.cancel()
	return f.g
}

// wait waits for stopped servers (g nil: none).
func (f *kafkaFront) wait(g *errgroup.Group) {
	if g == nil {
		return
	}
	if err := g.Wait(); err != nil {
		f.n.log.Warn("kafka servers of the ended term", "err", err)
	}
}
