package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rosettamq/rosetta/internal/app"
)

// TestHelmChartCluster renders the chart's cluster mode — three members
// and two protocol-only nodes behind the Service — and checks that each
// pod's arguments make a configuration `rosetta serve` accepts: pod n is
// member n+1 on its headless-Service name, a pod past the first three (the
// StatefulSet scaled up) joins through the others, a protocol-only node
// takes an id of its own and its pod's address; the Service sends clients
// to the protocol-only nodes, every group's RocketMQ ports included; one
// member and one protocol-only node at a time may be disrupted.
func TestHelmChartCluster(t *testing.T) {
	objs := renderChart(t, map[string]string{"cluster.enabled": "true", "protocolNodes.replicas": "2", "cluster.secret": "s3cret"})
	byKind := map[string][]map[string]any{}
	kinds := map[string]int{}
	for _, o := range objs {
		k := o["kind"].(string)
		byKind[k] = append(byKind[k], o)
		kinds[k]++
	}
	want := map[string]int{"ConfigMap": 1, "Service": 2, "StatefulSet": 1, "Deployment": 1, "PodDisruptionBudget": 2, "Secret": 1}
	for k, n := range want {
		if kinds[k] != n {
			t.Fatalf("objects %v, want %v", kinds, want)
		}
	}
	cfgText := at(t, byKind["ConfigMap"][0], "data", "rosetta.yaml").(string)
	sts := byKind["StatefulSet"][0]
	if at(t, sts, "spec", "replicas") != 3 || at(t, sts, "spec", "podManagementPolicy") != "Parallel" {
		t.Errorf("members' StatefulSet: replicas %v, policy %v", at(t, sts, "spec", "replicas"), at(t, sts, "spec", "podManagementPolicy"))
	}
	member := at(t, sts, "spec", "template", "spec", "containers", 0)
	for ordinal, id := range map[int]int{0: 1, 1: 2, 3: 4} {
		pod := "rel-rosetta-" + string(rune('0'+ordinal))
		cfg := podConfig(t, cfgText, member, pod, map[string]string{"POD_NAME": pod})
		host := pod + ".rel-rosetta-headless.msg.svc.cluster.local"
		if cfg.NodeID != id || cfg.Listen.Host != host {
			t.Errorf("pod %s: node %d on %s, want node %d on %s", pod, cfg.NodeID, cfg.Listen.Host, id, host)
		}
		if !strings.Contains(cfg.Cluster.Members, "2=rel-rosetta-1.rel-rosetta-headless.msg.svc.cluster.local") || strings.Count(cfg.Cluster.Members, "=") != 3 {
			t.Errorf("cluster.members %s", cfg.Cluster.Members)
		}
		if ordinal == 3 && !strings.Contains(cfg.Cluster.Join, "http://rel-rosetta-0.rel-rosetta-headless.msg.svc.cluster.local:8080") {
			t.Errorf("a member past the first three joins through %q", cfg.Cluster.Join)
		}
	}
	envNames := func(c any) []string {
		var out []string
		for _, e := range at(t, c, "env").([]any) {
			out = append(out, at(t, e, "name").(string))
		}
		return out
	}
	if e := envNames(member); !strings.Contains(strings.Join(e, ","), "ROSETTA_CLUSTER_SECRET") {
		t.Errorf("members' environment %v: no cluster secret", e)
	}
	dep := byKind["Deployment"][0]
	if at(t, dep, "spec", "replicas") != 2 {
		t.Errorf("protocol-only nodes: %v replicas", at(t, dep, "spec", "replicas"))
	}
	proto := at(t, dep, "spec", "template", "spec", "containers", 0)
	pcfg := podConfig(t, cfgText, proto, "rel-rosetta-protocol-5d9c7b-x2k4z", map[string]string{"POD_IP": "10.1.2.3"})
	if pcfg.Cluster.Roles != "protocol" || pcfg.NodeID < 1_000_000 || pcfg.Listen.Host != "10.1.2.3" {
		t.Errorf("protocol-only node: role %q, node %d, host %s", pcfg.Cluster.Roles, pcfg.NodeID, pcfg.Listen.Host)
	}
	if at(t, proto, "readinessProbe", "httpGet", "path") != "/healthz" || at(t, member, "readinessProbe", "httpGet", "path") != "/healthz" {
		t.Error("readiness is not /healthz")
	}
	for _, s := range byKind["Service"] {
		if at(t, s, "spec", "clusterIP") != nil {
			continue
		}
		if at(t, s, "spec", "selector", "app.kubernetes.io/name") != "rosetta-protocol" {
			t.Errorf("the Service selects %v, not the protocol-only nodes", at(t, s, "spec", "selector"))
		}
		var names []string
		for _, p := range at(t, s, "spec", "ports").([]any) {
			names = append(names, at(t, p, "name").(string))
		}
		if got := strings.Join(names, ","); got != "kafka,remoting,grpc,http,pulsar,remoting-1,grpc-1,pulsar-1,remoting-2,grpc-2,pulsar-2" {
			t.Errorf("the Service's ports %s", got)
		}
	}
	for _, pdb := range byKind["PodDisruptionBudget"] {
		if at(t, pdb, "spec", "maxUnavailable") != 1 {
			t.Errorf("disruption budget %v", at(t, pdb, "spec"))
		}
	}
}

// podConfig is the configuration a container's arguments make on pod
// (HOSTNAME), with env's values for the $(VAR) references.
func podConfig(t *testing.T, cfgText string, c any, pod string, env map[string]string) app.Config {
	t.Helper()
	t.Setenv("HOSTNAME", pod)
	dir := t.TempDir()
	path := filepath.Join(dir, "rosetta.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	overrides := map[string]string{"data_dir": dir}
	for _, a := range at(t, c, "args").([]any) {
		k, v, _ := strings.Cut(strings.TrimPrefix(a.(string), "--"), "=")
		for name, val := range env {
			v = strings.ReplaceAll(v, "$("+name+")", val)
		}
		if strings.Contains(v, "$(") {
			t.Fatalf("argument %s refers to an unset variable", a)
		}
		if k != "config" {
			overrides[k] = v
		}
	}
	cfg, err := app.LoadConfig(path, nil, overrides)
	if err != nil {
		t.Fatalf("pod %s: rosetta serve refuses the chart's configuration: %v", pod, err)
	}
	return cfg
}
