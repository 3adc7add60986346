package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/metrics"
)

var metricName = regexp.MustCompile(`\bkvcanary_[a-z_]+\b`)

func sinkMetrics() map[string]bool {
	m := map[string]bool{}
	for _, f := range metrics.Families() {
		m[f.Name] = true
	}
	return m
}

// checkNames fails for every kvcanary_ name in expr the sink does not serve.
func checkNames(t *testing.T, where, expr string) int {
	t.Helper()
	known := sinkMetrics()
	names := metricName.FindAllString(expr, -1)
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s: metric %s is not served by the metrics sink", where, n)
		}
	}
	return len(names)
}

func readYAMLDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return docs
			}
			t.Fatalf("%s: document %d: %v", path, len(docs)+1, err)
		}
		docs = append(docs, d)
	}
}

func TestAlertingRules(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
				For   string `yaml:"for"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	raw, err := os.ReadFile("prometheus/kvcanary-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("kvcanary-rules.yml: %v", err)
	}
	alerts := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if checkNames(t, "alert "+r.Alert, r.Expr) == 0 {
				t.Errorf("alert %s reads no kvcanary metric: %q", r.Alert, r.Expr)
			}
			alerts[r.Alert] = r.For
		}
	}
	for _, want := range []string{"KvcanaryLivePageOverwrite", "KvcanaryRoomMismatch", "KvcanaryCorruptionRateHigh"} {
		if _, ok := alerts[want]; !ok {
			t.Errorf("alert %s missing (have %v)", want, alerts)
		}
	}
	if alerts["KvcanaryCorruptionRateHigh"] != "10m" {
		t.Errorf("corruption rate alert holds for %q, the issue says 10m", alerts["KvcanaryCorruptionRateHigh"])
	}
	promtool := testenv.LookTool(t, "promtool", "apt-get install -y prometheus")
	for _, args := range [][]string{{"check", "rules", "prometheus/kvcanary-rules.yml"}, {"test", "rules", "prometheus/kvcanary-rules.test.yml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/kvcanary-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("kvcanary-dashboard.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard uid %q with %d panels", d.UID, len(d.Panels))
	}
	seen := map[string]bool{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkNames(t, "panel "+p.Title, tg.Expr)
			for _, n := range metricName.FindAllString(tg.Expr, -1) {
				seen[n] = true
			}
		}
	}
	for _, want := range []string{"kvcanary_live_page_overwrites_total", "kvcanary_room_mismatches_total", "kvcanary_sessions_total", "kvcanary_room_compares"} {
		if !seen[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

type container struct {
	Name            string   `yaml:"name"`
	Args            []string `yaml:"args"`
	SecurityContext struct {
		Privileged               *bool `yaml:"privileged"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
}

// The DaemonSet: the probe holds CAP_BPF and CAP_PERFMON and nothing more,
// the collector no capability; nothing is privileged; the metrics port, the
// --metrics-addr flag and the scrape annotation agree.
func TestKubernetesDaemonSet(t *testing.T) {
	docs := readYAMLDocs(t, "kubernetes/kvcanary-daemonset.yaml")
	var ds map[string]any
	for _, d := range docs {
		if d["kind"] == "DaemonSet" {
			ds = d
		}
	}
	if ds == nil {
		t.Fatalf("no DaemonSet among %d documents", len(docs))
	}
	raw, _ := yaml.Marshal(ds)
	var spec struct {
		Spec struct {
			Template struct {
				Metadata struct {
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"metadata"`
				Spec struct {
					Containers []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	cs := map[string]container{}
	for _, c := range spec.Spec.Template.Spec.Containers {
		cs[c.Name] = c
		sc := c.SecurityContext
		if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: privileged/allowPrivilegeEscalation must be stated false", c.Name)
		}
		if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("container %s drops %v, want [ALL]", c.Name, sc.Capabilities.Drop)
		}
	}
	probe, collector := cs["probe"], cs["collector"]
	if add := slices.Sorted(slices.Values(probe.SecurityContext.Capabilities.Add)); !slices.Equal(add, []string{"BPF", "PERFMON"}) {
		t.Errorf("probe adds capabilities %v, want exactly BPF and PERFMON", add)
	}
	if len(probe.Args) < 2 || probe.Args[0] != "probe" || probe.Args[1] != "cuda" {
		t.Errorf("probe container runs %v, want probe cuda", probe.Args)
	}
	if n := len(collector.SecurityContext.Capabilities.Add); n != 0 {
		t.Errorf("collector adds %d capabilities, wants none", n)
	}
	if len(collector.Args) == 0 || collector.Args[0] != "collect" || !slices.Contains(collector.Args, "--metrics-addr=0.0.0.0:9464") {
		t.Errorf("collector args %v: want collect --metrics-addr=0.0.0.0:9464", collector.Args)
	}
	if len(collector.Ports) != 1 || collector.Ports[0].ContainerPort != 9464 || spec.Spec.Template.Metadata.Annotations["prometheus.io/port"] != "9464" {
		t.Errorf("collector ports %+v, scrape annotation port %q: want 9464 both", collector.Ports, spec.Spec.Template.Metadata.Annotations["prometheus.io/port"])
	}
}

// The systemd unit runs collect with --metrics-addr, and no capability.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("systemd/kvcanary-collect.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' || s[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			t.Fatalf("kvcanary-collect.service:%d: %q is not KEY=VALUE", line, s)
		}
		keys[k] = v
	}
	exec := strings.Fields(keys["ExecStart"])
	if len(exec) < 2 || exec[1] != "collect" || !slices.Contains(exec, "--metrics-addr") {
		t.Errorf("ExecStart %q: want kvcanary collect … --metrics-addr", keys["ExecStart"])
	}
	if keys["CapabilityBoundingSet"] != "" || keys["AmbientCapabilities"] != "" || keys["NoNewPrivileges"] != "yes" {
		t.Errorf("the collector needs no capability: bounding set %q, ambient %q, NoNewPrivileges %q",
			keys["CapabilityBoundingSet"], keys["AmbientCapabilities"], keys["NoNewPrivileges"])
	}
	if !strings.Contains(keys["RestrictAddressFamilies"], "AF_UNIX") {
		t.Errorf("RestrictAddressFamilies %q shuts out the Unix socket", keys["RestrictAddressFamilies"])
	}
}

// The unit's recording recipe records to a fixed path in the state
// directory (collect keeps a bundle it finds there, renamed, instead of
// truncating it: TestCollectRestartKeepsTheBundle), and the recipe line is
// a valid ExecStart (systemd-analyze verify, when installed). The socket is
// 0600: the unit must not claim that a group reaches it.
func TestSystemdRecordingRecipe(t *testing.T) {
	raw, err := os.ReadFile("systemd/kvcanary-collect.service")
	if err != nil {
		t.Fatal(err)
	}
	var recipe string
	for i, l := range strings.Split(string(raw), "\n") {
		if !strings.Contains(l, "--record") {
			continue
		}
		if s := strings.TrimLeft(l, "# "); strings.HasPrefix(s, "ExecStart=") {
			if !strings.Contains(s, "--record /var/lib/kvcanary/") {
				t.Errorf("kvcanary-collect.service:%d: the recipe records outside the StateDirectory: %q", i+1, l)
			}
			recipe = s
		}
	}
	if recipe == "" {
		t.Fatal("no ExecStart= recipe with --record in the unit")
	}
	if strings.Contains(string(raw), "group kvcanary to reach") || strings.Contains(string(raw), "RuntimeDirectoryMode=0750") {
		t.Error("the unit still says a group reaches the 0600 socket")
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found: the recipe line is not verified")
	}
	var unit []string
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			// verify wants the program to exist here; what it checks is the
			// line's syntax (specifiers, quoting, %% and $$).
			l = strings.Replace(recipe, "/usr/local/bin/kvcanary", "/bin/true", 1)
		}
		unit = append(unit, l)
	}
	p := t.TempDir() + "/kvcanary-collect.service"
	if err := os.WriteFile(p, []byte(strings.Join(unit, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(analyze, "verify", p).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify of the recording recipe: %v\n%s", err, out)
	}
}
