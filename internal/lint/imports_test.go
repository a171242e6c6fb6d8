package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rosettamq/rosetta"

// protocolLibs are the packages only front-ends may use.
var protocolLibs = []string{
	"github.com/twmb/franz-go",
	"github.com/IBM/sarama",
	"github.com/apache/rocketmq-client-go",
	"github.com/apache/rocketmq-clients",
	"google.golang.org/grpc",
}

// rule says which project packages a layer may import (by path prefix under
// internal/) and whether protocol libraries are allowed.
type rule struct {
	allowed   []string
	protocols bool
}

// frontEnd is the rule of a front-end, which may also import its own
// subpackages (its codec, for one).
func frontEnd(self string) rule {
	return rule{allowed: []string{"model", "broker", "meta", "task", "telemetry", self}, protocols: true}
}

// rules maps a package directory prefix to its rule; the longest prefix wins.
var rules = map[string]rule{
	"internal/model":   {allowed: nil},
	"internal/storage": {allowed: []string{"model", "storage", "task"}},
	"internal/meta":    {allowed: []string{"model", "meta"}},
	"internal/cluster": {allowed: []string{"model", "meta", "cluster"}},
	// replication drives a storage engine as one replica of a Raft group.
	"internal/replication": {allowed: []string{"model", "storage", "task", "replication"}},
	// The member runtime: a cluster member's groups, terms, relays and
	// calls between members. It never imports the broker, the front-ends or
	// the admin server; the composition root gives it what serves clients.
	"internal/member":           {allowed: []string{"model", "storage", "meta", "cluster", "replication", "task", "tlsmux", "member"}},
	"internal/member/placement": {allowed: []string{"model"}},
	"internal/broker":           {allowed: []string{"model", "storage", "meta", "broker", "task"}},
	"internal/kafka":            frontEnd("kafka"),
	"internal/remoting":         frontEnd("remoting"),
	"internal/grpcv5":           frontEnd("grpcv5"),
	"internal/pulsar":           frontEnd("pulsar"),
	"internal/mqtt":             frontEnd("mqtt"),
	"internal/mqtt/packet":      {allowed: []string{"mqtt"}, protocols: true},
	"internal/mqtt/topic":       {allowed: nil},
	"internal/admin":            {allowed: []string{"model", "broker", "meta", "apiv1", "admin"}},
	"internal/apiv1":            {allowed: nil},
	"internal/telemetry":        {allowed: nil},
	"internal/bench":            {allowed: []string{"model", "storage", "broker", "meta", "bench", "kafka", "remoting", "grpcv5"}, protocols: true},
	// What serves clients: a group's broker stack and the protocol servers
	// over it, for a single node or a member's term.
	"internal/serving":  {allowed: []string{"member", "task", "model", "storage", "meta", "replication", "broker", "kafka", "remoting", "grpcv5", "pulsar", "mqtt", "admin", "apiv1", "serving"}},
	"internal/memory":   {allowed: nil},
	"internal/app":      {allowed: []string{"member", "serving", "memory", "task", "model", "storage", "meta", "cluster", "replication", "broker", "kafka", "remoting", "grpcv5", "pulsar", "mqtt", "admin", "apiv1", "app", "tlsmux", "telemetry"}, protocols: true},
	"internal/lint":     {allowed: nil},
	"internal/task":     {allowed: nil},
	"internal/tlsmux":   {allowed: nil},
	"internal/testutil": {allowed: nil},
	"cmd":               {allowed: []string{"app", "bench", "model", "apiv1"}, protocols: true},
	"cmd/rosetta":       {allowed: []string{"app", "memory", "model", "apiv1"}}, // the server: no load generator, no client library
	"cmd/rosetta-bench": {allowed: []string{"app", "bench", "model"}, protocols: true},
}

func ruleFor(dir string) (rule, string, bool) {
	best := ""
	for p := range rules {
		if (dir == p || strings.HasPrefix(dir, p+"/")) && len(p) > len(best) {
			best = p
		}
	}
	r, ok := rules[best]
	return r, best, ok
}

// TestImportsPointDown fails when a non-test file imports across layers.
func TestImportsPointDown(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s", root)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "node_modules" || name == "testdata" || strings.HasPrefix(name, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		r, layer, ok := ruleFor(rel)
		if !ok {
			t.Errorf("%s: package directory %s has no layering rule; add one to internal/lint", path, rel)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module+"/") {
				target := strings.TrimPrefix(p, module+"/")
				target = strings.TrimPrefix(target, "internal/")
				top := strings.Split(target, "/")[0]
				if !contains(r.allowed, top) {
					t.Errorf("%s (layer %s) imports %s: not allowed (may import %v)", rel, layer, p, r.allowed)
				}
				continue
			}
			if !r.protocols {
				for _, lib := range protocolLibs {
					if strings.HasPrefix(p, lib) {
						t.Errorf("%s (layer %s) imports protocol library %s", rel, layer, p)
					}
				}
			}
			if layer == "internal/model" && strings.Contains(strings.Split(p, "/")[0], ".") {
				t.Errorf("internal/model must use the standard library only, imports %s", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no files checked")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestRuleCatchesViolation makes sure the checker is not vacuous.
func TestRuleCatchesViolation(t *testing.T) {
	r, _, _ := ruleFor("internal/storage/commitlog")
	if contains(r.allowed, "broker") {
		t.Fatal("storage may not import broker")
	}
	r, _, _ = ruleFor("internal/broker")
	if r.protocols {
		t.Fatal("broker may not import protocol libraries")
	}
	r, _, _ = ruleFor("internal/kafka/handlers")
	if contains(r.allowed, "storage") || contains(r.allowed, "remoting") {
		t.Fatal("front-ends may not import storage or each other")
	}
}
