package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/traces"
)

// serveTwin serves the twin (instruments off) as `kvcanary sim serve` does.
func serveTwin(t *testing.T, mut func(*sim.Config)) string {
	t.Helper()
	_, url := serveTwinServer(t, mut)
	return url
}

// serveTwinServer is serveTwin that also returns the server, for what it
// recorded.
func serveTwinServer(t *testing.T, mut func(*sim.Config)) (*server.Server, string) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	mut(&cfg)
	srv, err := server.New(server.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go srv.Run(ctx)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		cancel()
		srv.Close()
	})
	return srv, hs.URL
}

func manifestConfig(t *testing.T, path string) (hook.RunConfig, *hook.RunStart) {
	t.Helper()
	r, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var rs *hook.RunStart
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := ev.Body.(*hook.RunStart); ok {
			rs = b
		}
	}
	return r.Manifest().Config, rs
}

// Against the twin standing in for a real server: two runs whose servers
// report different settings are attributed by ab without a single label.
func TestReproServerSettingsAB(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mutA, mutB func(*sim.Config)
		flag       string
	}{
		{"cuda_graph_max_bs", func(c *sim.Config) { c.CUDAGraphMaxBS = 32 }, func(c *sim.Config) { c.CUDAGraphMaxBS = 64 }, "cuda_graph_max_bs"},
		{"disable_cuda_graph", func(c *sim.Config) {}, func(c *sim.Config) { c.DisableCUDAGraph = true }, "cuda_graph"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for i, mut := range []func(*sim.Config){tc.mutA, tc.mutB} {
				url := serveTwin(t, mut)
				p := filepath.Join(dir, []string{"a", "b"}[i]+".kvtrace")
				_, errOut, err := runRepro(t, "--url", url, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--record", p)
				if err != nil {
					t.Fatalf("%v: %s", err, errOut)
				}
				if !strings.Contains(errOut, "repro: settings from /get_server_info") {
					t.Errorf("stderr %q: want the settings' source stated", errOut)
				}
				paths = append(paths, p)
			}
			cfg, rs := manifestConfig(t, paths[1])
			if rs == nil || rs.Config.CUDAGraph == nil || rs.Config.MultiStreamOverlap == nil || rs.Config.Provenance["cuda_graph"] != hook.ProvServer ||
				rs.Config.ServerArgs["cuda_graph_max_bs"] == "" || rs.Config.Sessions != 4 {
				t.Fatalf("run.start config %+v", rs)
			}
			if cfg.CUDAGraph == nil || *cfg.CUDAGraph != *rs.Config.CUDAGraph || cfg.CUDAGraphMaxBS != rs.Config.CUDAGraphMaxBS {
				t.Errorf("manifest config %+v differs from run.start's %+v", cfg, rs.Config)
			}
			out, _, err := runAB(t, paths[0], paths[1], "--json")
			if err != nil {
				t.Fatal(err)
			}
			var rep sessions.ABReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.FlagUnderTest == nil || rep.FlagUnderTest.Name != tc.flag || len(rep.DifferingFlags) != 1 {
				t.Fatalf("flag under test %+v, differing %+v; want %s alone", rep.FlagUnderTest, rep.DifferingFlags, tc.flag)
			}
			text, _, _ := runAB(t, paths[0], paths[1])
			if !strings.Contains(text, "flag under test: "+tc.flag) || !strings.Contains(text, "(reported by the server)") {
				t.Errorf("ab text:\n%s", text)
			}
		})
	}
}

// A real SGLang reports its args over HTTP; a server that does not leaves
// the settings unknown — in the bundle, in graphdiff report and in ab —
// and --label states what the user knows.
func TestReproSettingsUnknownAndLabelled(t *testing.T) {
	dir := t.TempDir()
	info := `{"disable_cuda_graph":false,"cuda_graph_max_bs":160,"port":30000,"internal_states":[{"last_gen_throughput":12.5}]}`
	fake := sglangFake(t, "")
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/get_server_info" {
			io.WriteString(w, info)
			return
		}
		fake.ServeHTTP(w, r)
	}))
	defer hs.Close()
	bare := httptest.NewServer(fake) // no server info: POSTs only
	defer bare.Close()

	reported := filepath.Join(dir, "reported.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "5", "--rounds", "2", "--tool-time", "0", "--record", reported,
		"--label", "multi_stream_overlap=off"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	cfg, _ := manifestConfig(t, reported)
	if cfg.CUDAGraph == nil || !*cfg.CUDAGraph || cfg.CUDAGraphMaxBS != 160 || cfg.MultiStreamOverlap == nil || *cfg.MultiStreamOverlap ||
		cfg.Provenance["cuda_graph"] != "server" || cfg.Provenance["multi_stream_overlap"] != "label" || cfg.ServerArgs["port"] != "30000" {
		t.Fatalf("reported + labelled: %+v", cfg)
	}

	unknown := filepath.Join(dir, "unknown.kvtrace")
	_, errOut, err := runRepro(t, "--url", bare.URL, "--sessions", "5", "--rounds", "2", "--tool-time", "0", "--record", unknown)
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if !strings.Contains(errOut, "did not report its settings") {
		t.Errorf("stderr %q: want the unknown-settings note", errOut)
	}
	cfg, rs := manifestConfig(t, unknown)
	if cfg.CUDAGraph != nil || cfg.MultiStreamOverlap != nil || rs == nil || rs.Config.CUDAGraph != nil || rs.Config.MultiStreamOverlap != nil {
		t.Fatalf("unknown settings recorded as %v/%v (run.start %+v)", cfg.CUDAGraph, cfg.MultiStreamOverlap, rs)
	}
	// A client-side run has no graphdiff samples: the no-data answer, never
	// "CUDA graphs are disabled" from settings nobody observed.
	out, _, _ := runGraphDiffReport(t, unknown, false, false)
	if strings.Contains(out, "disabled") || !strings.Contains(out, "no data") {
		t.Errorf("graphdiff report on an unknown-settings run:\n%s", out)
	}
	text, _, err := runAB(t, reported, unknown)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cuda_graph is true in run A (reported by the server) but unknown in run B: not compared",
		"multi_stream_overlap is false in run A (labelled) but unknown in run B"} {
		if !strings.Contains(text, want) {
			t.Errorf("ab text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "flag under test") {
		t.Errorf("ab credited a flag from unknown settings:\n%s", text)
	}
	if _, _, err := runRepro(t, "--url", hs.URL, "--label", "cuda_graph=maybe"); err == nil || !strings.Contains(err.Error(), `--label 1 "cuda_graph=maybe": want on or off`) {
		t.Errorf("bad label: %v", err)
	}
}

// bundleSpan returns the first and last event timestamps of a bundle, and
// those of its sched events.
func bundleSpan(t *testing.T, path string) (first, last int64, sched []int64) {
	t.Helper()
	r, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if first == 0 || ev.TS < first {
			first = ev.TS
		}
		last = max(last, ev.TS)
		if ev.Kind == hook.KindSched {
			sched = append(sched, ev.TS)
		}
	}
	return first, last, sched
}

// repro --server-log reads the log's timestamps in --tz: the same lines
// read as +05:00 stand five hours earlier than read as UTC.
func TestReproServerLogTZ(t *testing.T) {
	dir := t.TempDir()
	var got [2][]int64
	for i, tz := range []string{"UTC", "+05:00"} {
		logPath := filepath.Join(dir, "sglang"+tz+".log")
		if err := os.WriteFile(logPath, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(sglangFake(t, logPath))
		p := filepath.Join(dir, tz+".kvtrace")
		_, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "3", "--rounds", "2", "--tool-time", "0", "--concurrency", "1",
			"--record", p, "--server-log", logPath, "--tz", tz)
		hs.Close()
		if err != nil {
			t.Fatalf("%v: %s", err, errOut)
		}
		if want := "server log timestamps read in " + map[string]string{"UTC": "UTC", "+05:00": "UTC+05:00"}[tz] + " (--tz)"; !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
		_, _, got[i] = bundleSpan(t, p)
		if len(got[i]) == 0 {
			t.Fatalf("--tz %s: no sched events recorded", tz)
		}
	}
	// sglangFake stamps request k with second k%60 of 2026-11-29 10:00 (UTC read).
	first := time.Unix(0, got[0][0]).UTC()
	if first.Year() != 2026 || first.Hour() != 10 {
		t.Fatalf("UTC read: %v", first)
	}
	if d := time.Duration(got[0][0] - got[1][0]); d != 5*time.Hour {
		t.Errorf("first sched event read in UTC and in +05:00 differ by %v, want 5h", d)
	}
	if _, _, err := runRepro(t, "--url", "http://127.0.0.1:1", "--tz", "Mars/Olympus"); err == nil || !strings.Contains(err.Error(), "--tz") {
		t.Errorf("bad --tz: %v", err)
	}
}

// The twin standing in for SGLang, its log tailed by repro: the engine's
// sched events and repro's session events share one clock, so the bundle
// spans the run's real time (it once spanned 2026-01-01 to today).
func TestReproAgainstTwinOneClock(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "twin.log")
	logF, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logF.Close()
	url := serveTwin(t, func(c *sim.Config) { c.Log = logF })
	p := filepath.Join(dir, "twin.kvtrace")
	start := time.Now()
	if _, errOut, err := runRepro(t, "--url", url, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--record", p,
		"--server-log", logPath); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	end := time.Now()
	first, last, sched := bundleSpan(t, p)
	if len(sched) == 0 {
		t.Fatal("no sched events from the twin's log")
	}
	// Log lines carry whole seconds: allow one second of rounding.
	if time.Unix(0, first).Before(start.Add(-time.Second)) || time.Unix(0, last).After(end.Add(time.Second)) {
		t.Errorf("events span %v .. %v; the run took %v .. %v", time.Unix(0, first), time.Unix(0, last), start, end)
	}
}
