package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rosettamq/rosetta/internal/admin"
	"github.com/rosettamq/rosetta/internal/app"
	"github.com/rosettamq/rosetta/internal/app/apptest"
	"github.com/rosettamq/rosetta/internal/cluster"
	"github.com/rosettamq/rosetta/internal/meta/metatest"
	"github.com/rosettamq/rosetta/internal/model"
)

// TestNodeOnEtcd: a node whose metadata lives in etcd serves Kafka clients,
// its topics are in etcd, it is registered as a live node and Kafka
// clients see the cluster's identity; another node under the same cluster
// name is refused while nodes do not replicate one another; the node
// restarts on its data and etcd (replacing its older registration), and
// its registration goes when it stops.
func TestNodeOnEtcd(t *testing.T) {
	m := metatest.StartMembers(t, "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	config := func(dir string, id int) app.Config {
		c := apptest.TestConfig(dir)
		c.NodeID = id
		c.Cluster.EtcdEndpoints = m[0].Endpoint()
		c.Cluster.Name = "east"
		return c
	}
	dir := filepath.Join(t.TempDir(), "n1")
	n := apptest.StartTestNode(t, config(dir, 1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("on-etcd"))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "on-etcd"); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, kgo.StringRecord("one")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	meta := metatest.Open(t, "/rosetta/east/", m[0].Endpoint())
	if kvs, err := meta.List(ctx, "topics/"); err != nil || len(kvs) == 0 {
		t.Fatalf("topics in etcd: %d %v", len(kvs), err)
	}
	nodes, err := cluster.Nodes(ctx, meta)
	if err != nil || len(nodes) != 1 || nodes[0].ID != 1 || nodes[0].Endpoints["kafka"] == "" {
		t.Fatalf("registered nodes %+v %v", nodes, err)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clusterID, err := meta.Get(ctx, "cluster/id")
	if err != nil || md.Cluster != string(clusterID.Value) {
		t.Fatalf("Kafka cluster id %q, etcd's %q (%v)", md.Cluster, clusterID.Value, err)
	}
	cl.Close()
	var status admin.ClusterStatus
	resp, err := http.Get("http://" + n.HTTPAddr() + "/api/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&status)
	resp.Body.Close()
	if err != nil || status.Metadata != "etcd" || status.Name != "east" || len(status.Nodes) != 1 || status.Nodes[0].ID != 1 ||
		len(status.Groups) != 1 || status.Groups[0].Leader != 1 || status.Groups[0].LastIndex == 0 || status.ClusterID != md.Cluster {
		t.Fatalf("cluster status %+v %v", status, err)
	}

	// A second node under the same name is refused.
	if _, err := app.New(ctx, config(filepath.Join(t.TempDir(), "n2"), 2), slog.New(slog.DiscardHandler)); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a second node: %v", err)
	}

	// A restart on the same data: a newer incarnation, the same topics.
	n.Stop(t)
	if nodes, _ := cluster.Nodes(ctx, meta); len(nodes) != 0 {
		t.Fatalf("nodes after a stop %+v", nodes)
	}
	n = apptest.StartTestNode(t, config(dir, 1))
	cl, err = kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.ConsumeTopics("on-etcd"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fs := cl.PollFetches(ctx)
	if err := fs.Err(); err != nil || fs.NumRecords() != 1 || string(fs.Records()[0].Value) != "one" {
		t.Fatalf("after the restart: %d records, %v", fs.NumRecords(), err)
	}
	if nodes, _ := cluster.Nodes(ctx, meta); len(nodes) != 1 || nodes[0].Incarnation < 2 {
		t.Fatalf("nodes after the restart %+v", nodes)
	}
}

// TestGCTarget: gc_percent 0 picks the node kind's collector target; a
// set value wins.
func TestGCTarget(t *testing.T) {
	c := app.DefaultConfig()
	if got := c.GCTarget(); got != 400 {
		t.Fatalf("single node: %d", got)
	}
	c.Cluster.Members = "1=127.0.0.11,2=127.0.0.12,3=127.0.0.13"
	if got := c.GCTarget(); got != 100 {
		t.Fatalf("cluster member: %d", got)
	}
	c.GCPercent = 250
	if got := c.GCTarget(); got != 250 {
		t.Fatalf("set: %d", got)
	}
}

// TestGroupsConfig: several replication groups need cluster members, and
// at most 16.
func TestGroupsConfig(t *testing.T) {
	c := app.DefaultConfig()
	c.DataDir = t.TempDir()
	c.Cluster.Groups = 3
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("groups without members: %v", err)
	}
	c.Cluster.Members = "1=127.0.0.11,2=127.0.0.12,3=127.0.0.13"
	if err := c.Validate(); err != nil {
		t.Fatalf("three groups: %v", err)
	}
	c.Cluster.Groups = 17
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("17 groups: %v", err)
	}
}

// TestProtocolNodeConfig: a protocol-only node needs the members, an id of
// its own and its host; a data directory holding a member's data is
// refused when it starts, before anything is touched.
func TestProtocolNodeConfig(t *testing.T) {
	c := app.DefaultConfig()
	c.DataDir = t.TempDir()
	c.NodeID = 21
	c.Cluster.Roles = "protocol"
	c.Listen.Host = "127.0.0.21"
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("without members: %v", err)
	}
	c.Cluster.Members = "1=127.0.0.11,2=127.0.0.12,3=127.0.0.13"
	if err := c.Validate(); err != nil {
		t.Fatalf("a protocol-only node: %v", err)
	}
	c.Cluster.Roles = "proxy"
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("unknown role: %v", err)
	}
	c.Cluster.Roles, c.NodeID = "protocol", 2
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a member's id: %v", err)
	}
	c.NodeID = 21
	if err := os.MkdirAll(filepath.Join(c.DataDir, "storage"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := app.New(ctx, c, slog.New(slog.DiscardHandler)); !errors.Is(err, model.ErrInvalidConfig) || !strings.Contains(err.Error(), "member's data") {
		t.Fatalf("a member's data directory: %v", err)
	}
}

// TestJoinAndOrdinalConfig: a member past cluster.members (a StatefulSet
// scaled up) needs cluster.join and its host; a pod's ordinal names it.
func TestJoinAndOrdinalConfig(t *testing.T) {
	c := app.DefaultConfig()
	c.DataDir = t.TempDir()
	c.Cluster.Members = "1=a.svc,2=b.svc,3=c.svc"
	c.NodeID = 4
	if err := c.Validate(); !errors.Is(err, model.ErrInvalidConfig) {
		t.Fatalf("a fourth member without cluster.join: %v", err)
	}
	c.Cluster.Join, c.Listen.Host = "http://a.svc:8080", "d.svc"
	if err := c.Validate(); err != nil {
		t.Fatalf("a fourth member joining: %v", err)
	}
}
