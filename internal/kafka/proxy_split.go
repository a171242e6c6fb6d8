package kafka

import (
	"context"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What a Proxy splits by group, merges, and rewrites so that clients see
// protocol-only nodes only.

// topicCache keeps, from the Metadata answers members gave, the
// replication group of each partition of each topic, and topic ids' names
// (Fetch names topics by id).
type topicCache struct {
	mu     sync.RWMutex
	groups map[string][]int32
	names  map[[16]byte]string
	// allAsked is when every topic was last asked for (learnTopicIDs).
	allAsked time.Time
}

func (tc *topicCache) learn(groups map[string][]int32) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.groups == nil {
		tc.groups = map[string][]int32{}
	}
	for t, g := range groups {
		tc.groups[t] = g
	}
}

func (tc *topicCache) learnIDs(resp *kmsg.MetadataResponse) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.names == nil {
		tc.names = map[[16]byte]string{}
	}
	for _, t := range resp.Topics {
		if t.Topic != nil && t.TopicID != ([16]byte{}) {
			tc.names[t.TopicID] = *t.Topic
		}
	}
}

// groupOf is the group of a topic's partition (false: not known).
func (tc *topicCache) groupOf(topic string, p int32) (int, bool) {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	gs := tc.groups[topic]
	if p < 0 || int(p) >= len(gs) {
		return 0, false
	}
	return int(gs[p]), true
}

func (tc *topicCache) name(id [16]byte) string {
	tc.mu.RLock()
	defer tc.mu.RUnlock()
	return tc.names[id]
}

// learnTopics asks group 0's leader for the metadata of topics the cache
// does not know, so their partitions' groups are known.
func (c *proxyConn) learnTopics(ctx context.Context, pd *pending, topics []string) {
	var missing []string
	for _, t := range topics {
		if _, ok := c.p.cache.groupOf(t, 0); !ok && t != "" {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return
	}
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	for _, t := range missing {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, mt)
	}
	if resp, _, err := c.forward(ctx, pd, 0, requestHeader{Key: 3, Version: 12, ClientID: "rosetta-proxy"}, req); err == nil {
		c.p.cache.learnIDs(resp.(*kmsg.MetadataResponse))
	}
}

// learnTopicIDs asks group 0's leader for every topic's metadata when a
// request names a topic id the cache does not know (a client that learnt
// it from another protocol-only node, or before this one restarted).
func (c *proxyConn) learnTopicIDs(ctx context.Context, pd *pending) {
	c.p.cache.mu.Lock()
	if time.Since(c.p.cache.allAsked) < time.Second {
		c.p.cache.mu.Unlock()
		return
	}
	c.p.cache.allAsked = time.Now()
	c.p.cache.mu.Unlock()
	req := kmsg.NewPtrMetadataRequest()
	req.SetVersion(12)
	req.Topics = nil // all
	if resp, _, err := c.forward(ctx, pd, 0, requestHeader{Key: 3, Version: 12, ClientID: "rosetta-proxy"}, req); err == nil {
		c.p.cache.learnIDs(resp.(*kmsg.MetadataResponse))
	}
}

// selfHost is this node's host as its client reached it.
func (c *proxyConn) selfHost() string {
	host, _, err := net.SplitHostPort(c.nc.LocalAddr().String())
	if err != nil {
		return "localhost"
	}
	return host
}

// metadata answers with group 0's leader's metadata, every protocol-only
// node as a broker and this one leading every partition.
func (c *proxyConn) metadata(ctx context.Context, pd *pending, req *kmsg.MetadataRequest) {
	pc := c.prepare(ctx, pd, 0, pd.hdr, req)
	pd.issuedAll()
	resp, _, err := c.send(ctx, pc)
	m, _ := resp.(*kmsg.MetadataResponse)
	if err != nil || m == nil {
		// Group 0's leader is out of reach: the topics are told as not
		// led for now (closing a connection before its first answer
		// makes clients fail what they were sending), and the client
		// asks again.
		m = req.ResponseKind().(*kmsg.MetadataResponse)
		for _, t := range req.Topics {
			mt := kmsg.NewMetadataResponseTopic()
			mt.Topic, mt.TopicID, mt.ErrorCode = t.Topic, t.TopicID, kerr.LeaderNotAvailable.Code
			m.Topics = append(m.Topics, mt)
		}
	}
	c.p.cache.learnIDs(m)
	m.Brokers = nil
	for _, b := range c.brokers() {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID, mb.Host, mb.Port = b.id, b.host, b.port
		m.Brokers = append(m.Brokers, mb)
	}
	m.ControllerID = c.p.vid(c.p.opts.NodeID, 0)
	for i := range m.Topics {
		if m.Topics[i].Topic == nil {
			continue
		}
		for j := range m.Topics[i].Partitions {
			if p := &m.Topics[i].Partitions[j]; p.Leader >= 0 {
				p.Leader = c.leaderOf(*m.Topics[i].Topic, p.Partition)
			}
		}
	}
	c.answer(pd, m, false)
}

// brokers are the brokers clients are told of: each protocol-only node
// (this one always among them) once per replication group, under the
// group's broker id of the node (vid). A client keeps a connection per
// broker, so it reaches a node over one connection per group, as it would
// reach each group's leader directly: its requests in flight (five per
// connection for an idempotent producer) are per group, and one group's
// slow commit holds up no other's.
func (c *proxyConn) brokers() []brokerAddr {
	nodes := map[int32]string{}
	for id, host := range c.p.opts.Nodes() {
		nodes[id] = host
	}
	nodes[c.p.opts.NodeID] = c.selfHost()
	groups := max(c.p.opts.Groups(), 1)
	var out []brokerAddr
	for id, host := range nodes {
		for g := range groups {
			out = append(out, brokerAddr{c.p.vid(id, g), host, c.port})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// leaderOf is the broker id clients are told leads a topic's partition:
// this node's of the partition's group.
func (c *proxyConn) leaderOf(topic string, p int32) int32 {
	g, _ := c.p.cache.groupOf(topic, p)
	return c.p.vid(c.p.opts.NodeID, g)
}

// findCoordinator answers that this node coordinates every key whose group
// has a leader.
func (c *proxyConn) findCoordinator(pd *pending, req *kmsg.FindCoordinatorRequest) {
	resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
	host := c.selfHost()
	one := func(key string) (node int32, code int16) {
		g := c.coordinator(key)
		if c.p.opts.Leader(g) == 0 {
			return -1, kerr.CoordinatorNotAvailable.Code
		}
		return c.p.vid(c.p.opts.NodeID, g), 0
	}
	if req.Version < 4 {
		resp.NodeID, resp.ErrorCode = one(req.CoordinatorKey)
		if resp.ErrorCode == 0 {
			resp.Host, resp.Port = host, c.port
		}
		c.answer(pd, resp, false)
		return
	}
	for _, key := range req.CoordinatorKeys {
		co := kmsg.NewFindCoordinatorResponseCoordinator()
		co.Key = key
		co.NodeID, co.ErrorCode = one(key)
		if co.ErrorCode == 0 {
			co.Host, co.Port = host, c.port
		}
		resp.Coordinators = append(resp.Coordinators, co)
	}
	c.answer(pd, resp, false)
}

// describeCluster names the protocol-only nodes as the cluster's brokers.
func (c *proxyConn) describeCluster(resp *kmsg.DescribeClusterResponse) {
	resp.Brokers = nil
	for _, b := range c.brokers() {
		rb := kmsg.NewDescribeClusterResponseBroker()
		rb.NodeID, rb.Host, rb.Port = b.id, b.host, b.port
		resp.Brokers = append(resp.Brokers, rb)
	}
	resp.ControllerID = c.p.vid(c.p.opts.NodeID, 0)
}

// prepareAll places one sub-request per group in its stream, in group
// order, and lets the next request place its own.
func (c *proxyConn) prepareAll(ctx context.Context, pd *pending, byGroup map[int]kmsg.Request) map[int]*preparedCall {
	groups := make([]int, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	sort.Ints(groups)
	out := make(map[int]*preparedCall, len(groups))
	for _, g := range groups {
		out[g] = c.prepare(ctx, pd, g, pd.hdr, byGroup[g])
	}
	pd.issuedAll()
	return out
}

// fanOut runs one sub-request per group and collects the responses (nil
// where the group's leader could not be reached).
func fanOut[R kmsg.Response](ctx context.Context, c *proxyConn, pd *pending, byGroup map[int]kmsg.Request) map[int]R {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[int]R, len(byGroup))
	for g, pc := range c.prepareAll(ctx, pd, byGroup) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := c.send(ctx, pc)
			if err != nil || resp == nil {
				return
			}
			mu.Lock()
			out[g] = resp.(R)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// produce splits a produce by its partitions' groups.
func (c *proxyConn) produce(ctx context.Context, pd *pending, req *kmsg.ProduceRequest) {
	var names []string
	for _, t := range req.Topics {
		names = append(names, t.Topic)
	}
	c.learnTopics(ctx, pd, names)
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	unknown := map[string][]int32{}
	split := splitByGroup(req.Topics, producePartitions, func(i int, p *kmsg.ProduceRequestTopicPartition) (int, bool) {
		return c.p.cache.groupOf(req.Topics[i].Topic, p.Partition)
	}, func(t *kmsg.ProduceRequestTopic, p *kmsg.ProduceRequestTopicPartition) {
		unknown[t.Topic] = append(unknown[t.Topic], p.Partition)
	})
	byGroup := make(map[int]kmsg.Request, len(split))
	for g, topics := range split {
		cp := *req
		cp.Topics = topics
		byGroup[g] = &cp
	}
	if req.Acks == 0 {
		for _, pc := range c.prepareAll(ctx, pd, byGroup) {
			go func() { _, _, _ = c.send(context.WithoutCancel(ctx), pc) }()
		}
		close(pd.done) // no answer expected
		return
	}
	answers := fanOut[*kmsg.ProduceResponse](ctx, c, pd, byGroup)
	for g, sub := range byGroup {
		if a := answers[g]; a != nil {
			resp.Topics = append(resp.Topics, a.Topics...)
			resp.ThrottleMillis = max(resp.ThrottleMillis, a.ThrottleMillis)
			continue
		}
		for _, t := range sub.(*kmsg.ProduceRequest).Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.NotLeaderForPartition.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	for topic, parts := range unknown {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p, kerr.UnknownTopicOrPartition.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	resp.Brokers = nil
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			if p.CurrentLeader.LeaderID >= 0 {
				p.CurrentLeader.LeaderID = c.leaderOf(resp.Topics[i].Topic, p.Partition)
			}
		}
	}
	c.answer(pd, resp, false)
}

// splitByGroup sorts topics' partitions by the replication group each lives
// in (groupOf is given the topic's index in topics): per group, the topics in
// their order, each holding that group's partitions of it. Partitions
// groupOf does not place go to unknown.
func splitByGroup[T, P any](topics []T, partitions func(*T) *[]P, groupOf func(int, *P) (int, bool), unknown func(*T, *P)) map[int][]T {
	out := map[int][]T{}
	last := map[int]int{} // group → index in topics of its last topic entry
	for i := range topics {
		t := &topics[i]
		for _, p := range *partitions(t) {
			g, ok := groupOf(i, &p)
			if !ok {
				unknown(t, &p)
				continue
			}
			if j, seen := last[g]; !seen || j != i {
				entry := *t
				*partitions(&entry) = nil
				out[g] = append(out[g], entry)
				last[g] = i
			}
			sub := out[g]
			ps := partitions(&sub[len(sub)-1])
			*ps = append(*ps, p)
		}
	}
	return out
}

// fanOutByPartition splits a request of topics of partitions by group
// (part makes a group's request of its topics), sends each part to its
// group's leader and hands each answer to merge; a partition no group holds
// goes to fail as UNKNOWN_TOPIC_OR_PARTITION, one whose group's leader did
// not answer as NOT_LEADER_OR_FOLLOWER.
func fanOutByPartition[T, P any, R kmsg.Response](ctx context.Context, c *proxyConn, pd *pending, topics []T,
	partitions func(*T) *[]P, topic func(*T) string, partition func(*P) int32,
	part func([]T) kmsg.Request, merge func(R), fail func(topic string, p int32, code int16),
) {
	split := splitByGroup(topics, partitions, func(i int, p *P) (int, bool) {
		return c.p.cache.groupOf(topic(&topics[i]), partition(p))
	}, func(t *T, p *P) { fail(topic(t), partition(p), kerr.UnknownTopicOrPartition.Code) })
	byGroup := make(map[int]kmsg.Request, len(split))
	for g, ts := range split {
		byGroup[g] = part(ts)
	}
	answers := fanOut[R](ctx, c, pd, byGroup)
	for g, ts := range split {
		if a, ok := answers[g]; ok {
			merge(a)
			continue
		}
		for i := range ts {
			for _, p := range *partitions(&ts[i]) {
				fail(topic(&ts[i]), partition(&p), kerr.NotLeaderForPartition.Code)
			}
		}
	}
}

// fanOutByCoordinator splits a request naming consumer groups (part makes
// the request of some of them) by their coordinators, sends each part and
// hands each answer to merge; the groups of a coordinator that did not
// answer go to fail.
func fanOutByCoordinator[G any, R kmsg.Response](ctx context.Context, c *proxyConn, pd *pending, groups []G,
	id func(G) string, part func([]G) kmsg.Request, merge func(R), fail func(G),
) {
	split := map[int][]G{}
	for _, g := range groups {
		co := c.coordinator(id(g))
		split[co] = append(split[co], g)
	}
	byGroup := make(map[int]kmsg.Request, len(split))
	for co, gs := range split {
		byGroup[co] = part(gs)
	}
	answers := fanOut[R](ctx, c, pd, byGroup)
	for co, gs := range split {
		if a, ok := answers[co]; ok {
			merge(a)
			continue
		}
		for _, g := range gs {
			fail(g)
		}
	}
}

func producePartitions(t *kmsg.ProduceRequestTopic) *[]kmsg.ProduceRequestTopicPartition {
	return &t.Partitions
}

func fetchPartitions(t *kmsg.FetchRequestTopic) *[]kmsg.FetchRequestTopicPartition {
	return &t.Partitions
}

func listOffsetsPartitions(t *kmsg.ListOffsetsRequestTopic) *[]kmsg.ListOffsetsRequestTopicPartition {
	return &t.Partitions
}

func offsetForLeaderEpochPartitions(t *kmsg.OffsetForLeaderEpochRequestTopic) *[]kmsg.OffsetForLeaderEpochRequestTopicPartition {
	return &t.Partitions
}
