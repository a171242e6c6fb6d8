package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/rosettamq/rosetta/internal/app"
)

const chartDir = "../../deploy/helm/rosetta"

// TestHelmChart renders the chart — with helm when it is installed (and
// lints it), otherwise with the subset of helm's template functions the
// chart uses — under its defaults and with the options turned over, and
// checks the objects: the StatefulSet's arguments and the ConfigMap's file
// make a configuration `rosetta serve` accepts, every port it listens on is
// declared and served, and the pod runs as the image's non-root user.
func TestHelmChart(t *testing.T) {
	for name, set := range map[string]map[string]string{
		"defaults": nil,
		"options": {"persistence.enabled": "false", "serviceMonitor.enabled": "true", "kafkaAdvertised": "kafka.example.test:19092",
			"fullnameOverride": "mq"},
	} {
		t.Run(name, func(t *testing.T) {
			objs := renderChart(t, set)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o["kind"].(string)]++
			}
			want := map[string]int{"ConfigMap": 1, "Service": 2, "StatefulSet": 1}
			if set["serviceMonitor.enabled"] == "true" {
				want["ServiceMonitor"] = 1
			}
			if fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("objects %v, want %v", kinds, want)
			}
			checkChartObjects(t, objs, set)
		})
	}
}

// renderChart renders the chart (release "rel" in namespace "msg") into
// its objects.
func renderChart(t *testing.T, set map[string]string) []map[string]any {
	t.Helper()
	var out string
	if helm, err := exec.LookPath("helm"); err == nil {
		args := []string{"template", "rel", chartDir, "--namespace", "msg"}
		for k, v := range set {
			args = append(args, "--set", k+"="+v)
		}
		if b, err := exec.Command(helm, "lint", chartDir).CombinedOutput(); err != nil {
			t.Fatalf("helm lint: %v\n%s", err, b)
		}
		b, err := exec.Command(helm, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, b)
		}
		out = string(b)
	} else {
		out = renderWithoutHelm(t, set)
	}
	var objs []map[string]any
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		if err := dec.Decode(&o); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("rendered YAML: %v\n%s", err, out)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
	return objs
}

// renderWithoutHelm renders the chart's templates with Go's text/template
// and the helm and sprig functions the chart uses.
func renderWithoutHelm(t *testing.T, set map[string]string) string {
	t.Helper()
	var chart, values map[string]any
	readYAML(t, filepath.Join(chartDir, "Chart.yaml"), &chart)
	readYAML(t, filepath.Join(chartDir, "values.yaml"), &values)
	for k, v := range set {
		m := values
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = map[string]any{"true": true, "false": false}[v]
		if n, err := strconv.Atoi(v); err == nil {
			m[parts[len(parts)-1]] = n
		} else if v != "true" && v != "false" {
			m[parts[len(parts)-1]] = v
		}
	}
	data := map[string]any{
		"Values":  values,
		"Chart":   map[string]any{"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
		"Release": map[string]any{"Name": "rel", "Namespace": "msg", "Service": "Helm"},
	}
	root := template.New("chart").Option("missingkey=zero")
	root.Funcs(template.FuncMap{
		"include": func(name string, d any) (string, error) {
			var b bytes.Buffer
			err := root.ExecuteTemplate(&b, name, d)
			return b.String(), err
		},
		"toYaml": func(v any) string {
			b, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			return strings.TrimSuffix(string(b), "\n")
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"default": func(def, v any) any {
			if v == nil || v == "" || v == false {
				return def
			}
			return v
		},
		"trunc":      func(n int, s string) string { return s[:min(n, len(s))] },
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"quote":      func(v any) string { return fmt.Sprintf("%q", fmt.Sprint(v)) },
		"int": func(v any) int {
			switch n := v.(type) {
			case int:
				return n
			case int64:
				return int(n)
			case float64:
				return int(n)
			case string:
				i, _ := strconv.Atoi(n)
				return i
			}
			return 0
		},
		"add": func(a ...any) int {
			n := 0
			for _, v := range a {
				switch x := v.(type) {
				case int:
					n += x
				case int64:
					n += int(x)
				}
			}
			return n
		},
		"until": func(n int) []int {
			out := make([]int, n)
			for i := range out {
				out[i] = i
			}
			return out
		},
		"list":   func(v ...any) []any { return v },
		"append": func(l []any, v any) []any { return append(l, v) },
		"join": func(sep string, l []any) string {
			var parts []string
			for _, v := range l {
				parts = append(parts, fmt.Sprint(v))
			}
			return strings.Join(parts, sep)
		},
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i].(string)] = kv[i+1]
			}
			return m
		},
		"sha256sum": func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) },
	})
	files, _ := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := root.New(filepath.Base(f)).Parse(string(b)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasPrefix(name, "_") || strings.HasSuffix(name, ".txt") {
			continue
		}
		var b bytes.Buffer
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out.WriteString("---\n" + strings.ReplaceAll(b.String(), "<no value>", "") + "\n")
	}
	return out.String()
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// at walks a rendered object along path (map keys; a number indexes a list).
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("no %q in %v", k, v)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("no [%d] in %v", k, v)
			}
			v = l[k]
		}
	}
	return v
}

var entrypoint = regexp.MustCompile(`(?m)^ENTRYPOINT \[(.*)\]`)

func checkChartObjects(t *testing.T, objs []map[string]any, set map[string]string) {
	byKind := map[string][]map[string]any{}
	for _, o := range objs {
		byKind[o["kind"].(string)] = append(byKind[o["kind"].(string)], o)
	}
	sts := byKind["StatefulSet"][0]
	c := at(t, sts, "spec", "template", "spec", "containers", 0)
	// The container's arguments follow the image's entrypoint.
	cf, err := os.ReadFile("../../deploy/Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := entrypoint.FindSubmatch(cf)
	if m == nil {
		t.Fatal("the Containerfile has no ENTRYPOINT")
	}
	var args []string
	for _, a := range strings.Split(string(m[1]), ",") {
		args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
	}
	for _, a := range at(t, c, "args").([]any) {
		args = append(args, a.(string))
	}
	if args[1] != "serve" {
		t.Fatalf("the container runs %v", args)
	}
	// The configuration file the ConfigMap holds, where the pod mounts it.
	dir := t.TempDir()
	cfgText := at(t, byKind["ConfigMap"][0], "data", "rosetta.yaml").(string)
	overrides := map[string]string{}
	var cfgPath string
	for i := 2; i < len(args); i++ {
		k, v, ok := strings.Cut(strings.TrimPrefix(args[i], "--"), "=")
		if !ok && i+1 < len(args) {
			v = args[i+1]
			i++
		}
		if k == "config" {
			cfgPath = filepath.Join(dir, filepath.Base(v))
			if !strings.HasPrefix(v, "/etc/rosetta/") {
				t.Errorf("--config=%s: the ConfigMap is mounted at /etc/rosetta", v)
			}
			continue
		}
		overrides[k] = v
	}
	if cfgPath == "" {
		t.Fatal("no --config argument")
	}
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := app.LoadConfig(cfgPath, nil, overrides)
	if err != nil {
		t.Fatalf("rosetta serve refuses the chart's configuration: %v\nargs %v\n%s", err, args, cfgText)
	}
	if cfg.DataDir != "/data" {
		t.Errorf("data in %s, not on the /data volume", cfg.DataDir)
	}
	if want := set["kafkaAdvertised"]; want != "" && cfg.Listen.KafkaAdvertised != want {
		t.Errorf("Kafka advertised as %s, want %s", cfg.Listen.KafkaAdvertised, want)
	} else if want == "" && !strings.HasSuffix(cfg.Listen.KafkaAdvertised, ".msg.svc.cluster.local:9092") {
		t.Errorf("Kafka advertised as %s, want the Service's name", cfg.Listen.KafkaAdvertised)
	}
	// Every listener's port is a named container port, and the Service
	// forwards each name.
	ports := map[string]int{}
	for _, p := range at(t, c, "ports").([]any) {
		ports[at(t, p, "name").(string)] = at(t, p, "containerPort").(int)
	}
	for name, addr := range map[string]string{"kafka": cfg.Listen.Kafka, "remoting": cfg.Listen.Remoting, "grpc": cfg.Listen.GRPC, "http": cfg.Listen.HTTP} {
		if !strings.HasSuffix(addr, fmt.Sprintf(":%d", ports[name])) {
			t.Errorf("listener %s at %q, container port %d", name, addr, ports[name])
		}
	}
	var svc map[string]any
	for _, s := range byKind["Service"] {
		if at(t, s, "spec", "clusterIP") == nil {
			svc = s
		}
	}
	for _, p := range at(t, svc, "spec", "ports").([]any) {
		if _, ok := ports[at(t, p, "targetPort").(string)]; !ok {
			t.Errorf("the Service forwards to %v, which the container does not declare", at(t, p, "targetPort"))
		}
	}
	if at(t, c, "readinessProbe", "httpGet", "path") != "/healthz" || at(t, c, "readinessProbe", "httpGet", "port") != "http" {
		t.Errorf("readiness probe %v", at(t, c, "readinessProbe"))
	}
	// Non-root, as the image's user (distroless nonroot is 65532).
	pod := at(t, sts, "spec", "template", "spec", "securityContext")
	if at(t, pod, "runAsNonRoot") != true || at(t, pod, "runAsUser") != 65532 || !bytes.Contains(cf, []byte("USER nonroot")) {
		t.Errorf("pod security context %v", pod)
	}
	// Data on the claim, or on an emptyDir when persistence is off.
	vct := at(t, sts, "spec", "volumeClaimTemplates")
	if set["persistence.enabled"] == "false" {
		if vct != nil {
			t.Errorf("persistence off, yet claims %v", vct)
		}
	} else if at(t, vct, 0, "metadata", "name") != "data" {
		t.Errorf("claims %v", vct)
	}
	mounted := false
	for _, v := range at(t, c, "volumeMounts").([]any) {
		mounted = mounted || at(t, v, "name") == "data" && at(t, v, "mountPath") == "/data"
	}
	if !mounted {
		t.Error("the data volume is not mounted at /data")
	}
}
