package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// Each of the four streaming commands takes both export flags.
func TestExportFlagsOnStreamingCommands(t *testing.T) {
	flags := []string{"--metrics-addr", "127.0.0.1:9464", "--otlp-endpoint", "http://otel:4318"}
	var got *exportOptions
	cmds := map[string]func() error{
		"collect": func() error {
			o, err := parseCmd(NewCmdCollect, append([]string{"--listen", "unix:///tmp/x.sock"}, flags...)...)
			if o != nil {
				got = &o.Export
			}
			return err
		},
		"watch": func() error {
			o, err := parseCmd(NewCmdWatch, append([]string{"--sim"}, flags...)...)
			if o != nil {
				got = &o.Export
			}
			return err
		},
		"wrap": func() error {
			o, err := parseCmd(NewCmdWrap, append(flags, "--", "true")...)
			if o != nil {
				got = &o.Export
			}
			return err
		},
		"sim serve": func() error {
			o, err := parseCmd(NewCmdSimServe, flags...)
			if o != nil {
				got = &o.Export
			}
			return err
		},
	}
	for name, run := range cmds {
		got = nil
		if err := run(); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got == nil || got.MetricsAddr != "127.0.0.1:9464" || got.OTLPEndpoint != "http://otel:4318" {
			t.Errorf("%s: export options %+v", name, got)
		}
	}
}

func TestExportFlagsBadValuesAreUsageErrors(t *testing.T) {
	for _, o := range []exportOptions{{MetricsAddr: "9464"}, {OTLPEndpoint: "otel:4318"}} {
		_, _, err := o.start(context.Background(), io.Discard, exportSource{Run: "r"})
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%+v: err %v (exit %d), want a usage error", o, err, cmdutil.ExitCode(err))
		}
	}
	var none exportOptions
	sinks, stop, err := none.start(context.Background(), io.Discard, exportSource{})
	if err != nil || len(sinks) != 0 || stop() != nil {
		t.Errorf("no flags: %d sinks, err %v", len(sinks), err)
	}
}

// startPrometheus runs Debian's prometheus on a free port with a temporary
// config and storage, scraping target every second, with the shipped
// alerting rules loaded. It returns the API's base URL.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs("../../deploy/prometheus/kvcanary-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: kvcanary
    static_configs:
      - targets: [%q]
`, rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	return "http://" + addr
}

// promQuery runs an instant query and returns the single sample's value
// (false while there is none).
func promQuery(base, q string) (float64, bool, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, false, nil // not up yet
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, false, fmt.Errorf("query %s: %w", q, err)
	}
	if r.Status != "success" {
		return 0, false, fmt.Errorf("query %s: %s", q, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, false, nil
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil, err
}

// The test: a twin run with an injected transfer fault feeds a
// collector serving --metrics-addr; a real Prometheus scrapes it; PromQL
// through its HTTP API returns the counts the run's own report gives
// (sessions by outcome, room mismatches, live-page overwrites, divergent
// samples), and the shipped alerts fire. promtool check metrics passes on
// the scrape.
func TestCollectMetricsScrapedByPrometheus(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	if testing.Short() {
		t.Skip("starts Prometheus and a twin run")
	}
	bin := testenv.LookTool(t, "prometheus", "apt-get install -y prometheus")
	dir := t.TempDir()
	sock := filepath.Join(dir, "c.sock")
	metricsAddr := testenv.FreeAddr(t)
	ios, _, _, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now},
		JSON: &cmdutil.JSONFlags{JSON: true}, Listen: "unix://" + sock, Run: "r-prom",
		Export: exportOptions{MetricsAddr: metricsAddr}}
	c, stop := runCollect(t, opts)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	// The twin, with the transfer fault, emits to the collector; the same
	// events go through analyzers here, with collect's options: the run's
	// report.
	cfg := sim.DefaultConfig()
	cfg.Inject = []string{"transfer-race"}
	cfg.Instruments = sim.AllInstruments()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	em, err := hook.Dial("unix://"+sock, hook.DialOptions{QueueBytes: 1 << 30, FlushTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	as := analyzers.All(analyzers.Options{})
	w := sim.DefaultWorkload()
	w.Sessions, w.Rounds = 24, 3
	if raceEnabled {
		// The run in process was minutes of the twin's arithmetic under
		// -race; 8 sessions still corrupt some and mismatch rooms (the
		// test fails when the fault shows nowhere). The collector, the
		// emitter and the scrape see the same concurrency at any size.
		w.Sessions = 8
	}
	w.Judge = outcome.Classifier{}.Outcome
	res, err := sim.Run(context.Background(), cfg, w, fanOut([]hook.Publisher{em, hook.WithAnalyzers(hook.PublishFunc(func(hook.Event) {}), as...)}))
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Close(); err != nil {
		t.Fatal(err)
	}
	if st := em.Stats(); st.Dropped != 0 || st.Invalid != 0 {
		t.Fatalf("emitter lost events: %+v", st)
	}
	deadline := time.Now().Add(60 * time.Second) // a hang guard: only a failure waits this long
	for c.Stats().Events < em.Stats().Sent {
		if time.Now().After(deadline) {
			t.Fatalf("collector has %d of %d events", c.Stats().Events, em.Stats().Sent)
		}
		time.Sleep(10 * time.Millisecond)
	}

	outcomes := map[string]int{}
	for _, s := range res.PerSession {
		outcomes[s.Outcome]++
	}
	sums := analyzers.SetOf(as...).Summaries()
	cs, cn, gd := *sums.Checksum, *sums.Canary, *sums.Graphdiff
	live := cn.LivePageOverwrites
	if cn.Between != nil {
		live += cn.Between.LivePageOverwrites
	}
	if cs.Mismatched == 0 || outcomes[hook.OutcomeLeak]+outcomes[hook.OutcomeNoTool] == 0 {
		t.Fatalf("the injected fault showed nowhere: rooms %+v, outcomes %v", cs, outcomes)
	}
	want := map[string]float64{
		`sum(kvcanary_room_mismatches_total{run="r-prom"})`:                        float64(cs.Mismatched),
		`sum(kvcanary_room_compares{class="match"})`:                               float64(cs.Matched),
		`sum(kvcanary_sessions_total{outcome="leak"})`:                             float64(outcomes[hook.OutcomeLeak]),
		`sum(kvcanary_sessions_total{outcome="no_tool"})`:                          float64(outcomes[hook.OutcomeNoTool]),
		`sum(kvcanary_sessions_total{outcome="done"})`:                             float64(outcomes[hook.OutcomeDone]),
		`sum(kvcanary_live_page_overwrites_total)`:                                 float64(live),
		`sum(kvcanary_graphdiff_divergent_samples_total)`:                          float64(gd.Divergent),
		`sum(kvcanary_events_total{kind="session"})`:                               float64(len(res.PerSession)),
		`sum(kvcanary_collector_connections_total)`:                                1,
		`count(ALERTS{alertname="KvcanaryRoomMismatch",alertstate="firing"})`:      1,
		`count(ALERTS{alertname="KvcanaryLivePageOverwrite",alertstate="firing"})`: map[bool]float64{true: 1, false: 0}[live > 0],
	}
	base := startPrometheus(t, bin, metricsAddr)
	pending := map[string]float64{}
	for q, v := range want {
		pending[q] = v
	}
	var last map[string]string
	for len(pending) > 0 {
		last = map[string]string{}
		for q, v := range pending {
			got, ok, err := promQuery(base, q)
			if err != nil {
				t.Fatal(err)
			}
			if ok && got == v {
				delete(pending, q)
			}
			last[q] = fmt.Sprintf("%v (have %v)", v, got)
		}
		if len(pending) > 0 && time.Now().After(deadline) {
			for q := range pending {
				t.Errorf("PromQL %s: want %s", q, last[q])
			}
			t.FailNow()
		}
		time.Sleep(250 * time.Millisecond)
	}

	// promtool check metrics on a real scrape.
	if promtool, err := exec.LookPath("promtool"); err == nil {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		check := exec.Command(promtool, "check", "metrics")
		check.Stdin = bytes.NewReader(body)
		if out, err := check.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
	stopped = true
	if err := stop(); err != nil {
		t.Fatalf("collect: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut.String(), "metrics: serving http://"+metricsAddr+"/metrics") {
		t.Errorf("stderr does not say where metrics are served: %q", errOut)
	}
}

// The command lines deploy/ ships parse with the real commands: the systemd
// unit's ExecStart and the DaemonSet's collector and probe containers.
func TestDeployCommandLinesParse(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/systemd/kvcanary-collect.service")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := os.ReadFile("../../deploy/kubernetes/kvcanary-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]string
	for _, l := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(l, "ExecStart="); ok {
			lines = append(lines, strings.Fields(rest)[1:])
		}
	}
	// The containers' args: "- collect" then "- --flag=value" lines.
	var cur []string
	for _, l := range strings.Split(string(ds), "\n") {
		s := strings.TrimSpace(l)
		switch {
		case s == "args:":
			cur = []string{}
		case cur != nil && strings.HasPrefix(s, "#"): // a comment inside the list
		case cur != nil && strings.HasPrefix(s, "- "):
			cur = append(cur, strings.TrimPrefix(s, "- "))
		case cur != nil:
			lines = append(lines, cur)
			cur = nil
		}
	}
	if len(lines) != 3 {
		t.Fatalf("found %d command lines in deploy/, want 3 (unit, collector, probe): %q", len(lines), lines)
	}
	for _, args := range lines {
		ran := false
		switch args[0] {
		case "collect":
			var o *CollectOptions
			o, err = parseCmd(NewCmdCollect, args[1:]...)
			ran = o != nil && o.Export.MetricsAddr != ""
		case "probe":
			var o *ProbeCUDAOptions
			o, err = parseCmd(NewCmdProbe, args[1:]...)
			ran = o != nil
		default:
			t.Fatalf("unexpected command line %q", args)
		}
		if err != nil || !ran {
			t.Errorf("%q: %v (ran with --metrics-addr: %v)", args, err, ran)
		}
	}
}

// start wires both sinks: the OTLP exporter reaches the endpoint and stop
// reports its counts; /metrics is served where stderr says.
func TestExportStartAndStop(t *testing.T) {
	var posts atomic.Int64
	otel := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otel.Close()
	var stderr bytes.Buffer
	o := exportOptions{MetricsAddr: "127.0.0.1:0", OTLPEndpoint: otel.URL}
	sinks, stop, err := o.start(context.Background(), &stderr, exportSource{Run: "r-exp"})
	if err != nil || len(sinks) != 1 {
		t.Fatalf("start: %d sinks, %v", len(sinks), err)
	}
	pub := withSinks(nil, sinks)
	pub.Publish(hook.Event{Kind: hook.KindSession, TS: 1, Body: &hook.Session{ID: "a", Outcome: hook.OutcomeLeak}})
	pub.Publish(hook.Event{Kind: hook.KindReplay, TS: 2, Body: &hook.Replay{Mode: "graph"}})
	_, after, ok := strings.Cut(stderr.String(), "metrics: serving http://")
	if !ok {
		t.Fatalf("stderr does not say where /metrics is: %q", stderr.String())
	}
	addr := strings.TrimSuffix(strings.Fields(after)[0], "/metrics")
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `kvcanary_sessions_total{host="",outcome="leak",rank="",role="",run="r-exp"} 1`) {
		t.Errorf("scrape lacks the leaked session under run r-exp:\n%s", body)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !strings.Contains(stderr.String(), "otlp: 1 records exported, 0 failed, 0 dropped") || posts.Load() < 2 {
		t.Errorf("%d posts; stderr:\n%s", posts.Load(), stderr.String())
	}
}

// A --metrics-addr other hosts reach needs --metrics-remote: nothing
// listens beyond loopback unless the user says so.
func TestMetricsAddrRemoteNeedsConsent(t *testing.T) {
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9464", false, true}, {"localhost:9464", false, true}, {"[::1]:9464", false, true},
		{"0.0.0.0:9464", false, false}, {":9464", false, false}, {"10.0.0.5:9464", false, false},
		{"0.0.0.0:9464", true, true},
	} {
		o := exportOptions{MetricsAddr: c.addr, MetricsRemote: c.remote}
		err := o.check()
		if (err == nil) != c.ok {
			t.Errorf("--metrics-addr %s remote=%v: %v", c.addr, c.remote, err)
		}
		if err != nil && (cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--metrics-remote")) {
			t.Errorf("--metrics-addr %s: %v, want a usage error naming --metrics-remote", c.addr, err)
		}
	}
}
