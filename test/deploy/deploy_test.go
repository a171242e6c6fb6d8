// Package deploy_test checks the files under deploy/ against the product:
// the metrics the alert rules and the dashboard query exist, the systemd
// unit verifies, the container file builds the server as it should.
package deploy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/rosettamq/rosetta/internal/app/apptest"
)

var metricName = regexp.MustCompile(`\brosetta_[a-z0-9_]+`)

// exposed scrapes a node that holds a topic and a group's offsets and
// returns the metric families it exposes.
func exposed(t *testing.T) map[string]bool {
	t.Helper()
	n := apptest.StartTestNode(t, apptest.TestConfig(t.TempDir()))
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.KafkaAddr()), kgo.DefaultProduceTopic("deploy"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	body := strings.NewReader(`{"to":"earliest","topic":"deploy"}`)
	if resp, err := http.Post("http://"+n.HTTPAddr()+"/api/v1/groups/g/reset", "application/json", body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("commit a group's offsets: %v %v", resp, err)
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	out := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out[strings.Fields(name)[0]] = true
		}
	}
	return out
}

// conditional are metrics a single node without that kind of state does
// not expose; they must be defined in the source.
var conditional = map[string]string{
	"rosetta_replication_": "internal/member/metrics.go",
	"rosetta_pop_":         "internal/admin/admin.go",
}

func checkNames(t *testing.T, what, text string, have map[string]bool) {
	t.Helper()
	for _, name := range metricName.FindAllString(text, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && have[b] {
				base = b
			}
		}
		if have[base] {
			continue
		}
		found := false
		for prefix, file := range conditional {
			if rest, ok := strings.CutPrefix(name, prefix); ok {
				src, err := os.ReadFile(filepath.Join("../..", file))
				found = err == nil && (strings.Contains(string(src), `"`+rest+`"`) || strings.Contains(string(src), `"`+name+`"`))
			}
		}
		if !found {
			t.Errorf("%s queries %s, which no node exposes", what, name)
		}
	}
}

// TestMonitoringFiles: every metric the alert rules and the Grafana
// dashboard use exists; both files parse.
func TestMonitoringFiles(t *testing.T) {
	have := exposed(t)
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil || len(rules.Groups) == 0 || len(rules.Groups[0].Rules) < 5 {
		t.Fatalf("alerts.yml: %v %+v", err, rules)
	}
	for _, r := range rules.Groups[0].Rules {
		if r.Alert == "" || r.Expr == "" {
			t.Errorf("a rule without a name or an expression: %+v", r)
		}
		checkNames(t, "alert "+r.Alert, r.Expr, have)
	}
	raw, err = os.ReadFile("../../deploy/grafana/rosetta.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil || len(dash.Panels) < 10 {
		t.Fatalf("rosetta.json: %v, %d panels", err, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			checkNames(t, "panel "+p.Title, tg.Expr, have)
		}
	}
}

// TestSystemdUnit: the unit verifies where systemd-analyze exists.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/rosetta.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/bin/rosetta serve", "User=rosetta", "KillSignal=SIGTERM", "NoNewPrivileges=true"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	out, err := exec.Command(path, "verify", "../../deploy/systemd/rosetta.service").CombinedOutput()
	// A missing binary or user on this machine is not the unit's fault.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.Contains(line, "/usr/local/bin/rosetta") && !strings.Contains(line, "user") {
			t.Errorf("systemd-analyze verify: %s (%v)", line, err)
		}
	}
}

// TestContainerFile: a static build of the server binary run as non-root.
func TestContainerFile(t *testing.T) {
	f, err := os.ReadFile("../../deploy/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/rosetta", "USER nonroot", "EXPOSE 9092 9876 8081 6650 6651 1883 8883 8080", "--data_dir"} {
		if !strings.Contains(string(f), want) {
			t.Errorf("the container file lacks %q", want)
		}
	}
	if strings.Contains(string(f), "rosetta-bench") {
		t.Error("the container image holds the load generators")
	}
}
