//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/runconfig"
	"github.com/kvcanary/kvcanary/tui"
)

func TestWrapFlags(t *testing.T) {
	got, err := parseCmd(NewCmdWrap, "--record", "d.kvtrace", "--canary-policy", "sweep:8", "--graphdiff-every", "64",
		"--graphdiff-layers", "0,3,60", "--config", "cuda_graph=on", "--",
		"python3", "-m", "sglang.launch_server", "--disaggregation-mode", "decode", "--record", "theirs")
	if err != nil {
		t.Fatal(err)
	}
	if got.Record != "d.kvtrace" || got.Engine != "sglang" || strings.Join(got.Command, " ") != "python3 -m sglang.launch_server --disaggregation-mode decode --record theirs" {
		t.Fatalf("options %+v", got)
	}
	want := []WrapSetting{{"canary-policy", "KVCANARY_CANARY_POLICY", "sweep:8"}, {"graphdiff-every", "KVCANARY_GRAPHDIFF_EVERY", "64"},
		{"graphdiff-layers", "KVCANARY_GRAPHDIFF_LAYERS", "0,3,60"}}
	if len(got.Settings) != len(want) {
		t.Fatalf("settings %+v, want %+v (flags not given set nothing)", got.Settings, want)
	}
	for i := range want {
		if got.Settings[i] != want[i] {
			t.Fatalf("setting %d: %+v, want %+v", i, got.Settings[i], want[i])
		}
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "give the command after --"},
		{[]string{"--"}, "give the command after --"},
		{[]string{"--canary-policy", "sweep:0", "--", "x"}, `--canary-policy "sweep:0": sweep:N: "0" is not a whole number of at least 1`},
		{[]string{"--canary-policy", "some", "--", "x"}, "want live, all or sweep:N"},
		{[]string{"--canary-every", "0", "--", "x"}, `--canary-every "0"`},
		{[]string{"--graphdiff-every", "1.5", "--", "x"}, `--graphdiff-every "1.5"`},
		{[]string{"--graphdiff-layers", "1,x", "--", "x"}, `item 2 "x" is not a layer id`},
		{[]string{"--graphdiff-layers", "1,1", "--", "x"}, "layer 1 repeats"},
		{[]string{"--graphdiff-logits", "topk:", "--", "x"}, "topk:N"},
		{[]string{"--graphdiff-logits", "half", "--", "x"}, "want full, topk:N or none"},
		{[]string{"--instruments", "checksum,,canary", "--", "x"}, "item 2 is empty"},
		{[]string{"--instruments", "checksum,kv", "--", "x"}, `item 2 "kv" is no instrument`},
		{[]string{"--instruments", "canary,canary", "--", "x"}, `item 2 "canary" repeats`},
		{[]string{"--config", "cuda_graph", "--", "x"}, "want KEY=VALUE"},
		{[]string{"--config", "cuda_graph=maybe", "--", "x"}, "want on or off"},
		{[]string{"--config", "index_k_dtype=int4", "--", "x"}, "want fp8, fp4 or bf16"},
		{[]string{"--config", "pool_tokens=-1", "--", "x"}, "whole number"},
		{[]string{"--config", "a=1", "--config", "a=2", "--", "x"}, "key a stated twice"},
		{[]string{"--watch", "--json", "--", "x"}, "do not go together"},
		{[]string{"--log", "x.log", "--", "x"}, "--log needs --watch"},
	} {
		ran, err := parseCmd(NewCmdWrap, tc.args...)
		if ran != nil || cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (exit %d), want a usage error containing %q", tc.args, err, cmdutil.ExitCode(err), tc.want)
		}
	}
}

func TestWrapEnv(t *testing.T) {
	base := []string{"HOME=/home/u", "PYTHONPATH=/mine:/also", "KVCANARY_ADDR=unix:///stale.sock", "KVCANARY_CANARY_EVERY=4", "KVCANARY_LOG=debug"}
	env := wrapEnv(base, "/cache/pyhook-1", "unix:///tmp/w/collector.sock", "r1",
		[]WrapSetting{{Flag: "canary-policy", Env: "KVCANARY_CANARY_POLICY", Value: "all"}})
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Fatalf("%s twice in %q", k, env)
		}
		got[k] = v
	}
	for k, v := range map[string]string{
		"HOME": "/home/u", "PYTHONPATH": "/cache/pyhook-1:/mine:/also", "KVCANARY_ADDR": "unix:///tmp/w/collector.sock",
		"KVCANARY_RUN": "r1", "KVCANARY_CANARY_POLICY": "all",
		"KVCANARY_CANARY_EVERY": "4", "KVCANARY_LOG": "debug", // not given as flags: the user's own stay
	} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q (env %q)", k, got[k], v, env)
		}
	}
	env = wrapEnv([]string{"PYTHONPATH="}, "/p", "a", "r", nil)
	if env[0] != "PYTHONPATH=/p" {
		t.Fatalf("empty PYTHONPATH: %q", env)
	}
}

// Unknown is not false: engine booleans wrap cannot observe stay unknown
// (nil) until the user states them, and what is stated is labelled.
func TestWrapRunConfig(t *testing.T) {
	rc, err := wrapRunConfig("sglang", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Engine != "sglang" || rc.CUDAGraph != nil || rc.MultiStreamOverlap != nil || len(rc.Extra) != 0 || len(rc.Provenance) != 0 {
		t.Fatalf("nothing stated: %+v", rc)
	}
	rc, err = wrapRunConfig("vllm", []string{"cuda_graph=off", "multi_stream_overlap=on", "index_k_dtype=fp8", "cuda_graph_max_bs=48",
		"disaggregation=pd", "max_running_requests=64", "pool_tokens=100000", "model=deepseek-v3.2", "speculative=eagle"})
	if err != nil {
		t.Fatal(err)
	}
	if rc.Engine != "vllm" || rc.CUDAGraph == nil || *rc.CUDAGraph || rc.MultiStreamOverlap == nil || !*rc.MultiStreamOverlap ||
		rc.IndexKDtype != "fp8" || rc.CUDAGraphMaxBS != 48 ||
		rc.Disaggregation != "pd" || rc.MaxRunningRequests != 64 || rc.PoolTokens != 100000 || rc.Model != "deepseek-v3.2" ||
		rc.Extra["speculative"] != "eagle" || len(rc.Extra) != 1 {
		t.Fatalf("all stated: %+v", rc)
	}
	for _, k := range []string{"cuda_graph", "multi_stream_overlap", "index_k_dtype", "cuda_graph_max_bs", "disaggregation",
		"max_running_requests", "pool_tokens", "extra.speculative"} {
		if rc.Provenance[k] != hook.ProvLabel {
			t.Errorf("provenance of %s = %q, want label", k, rc.Provenance[k])
		}
	}
}

func TestWrapLayers(t *testing.T) {
	sums := analyzers.Summaries{Canary: &canary.Summary{Replays: 3, Policy: "live", LivePageOverwrites: 2},
		Graphdiff: &graphdiff.Summary{}, Checksum: &checksum.Summary{Rooms: 5, Missing: 5}}
	ls := wrapLayers(sums, map[string]uint64{"canary.pages": 3, "room.checksum": 5}, map[string]int{"canary": 2}, wrapSamplingIn{})
	var got []string
	for _, l := range ls {
		got = append(got, l.Layer+"="+l.Status)
	}
	if want := "transfer=one side only buffer=finding compute=not measured"; strings.Join(got, " ") != want {
		t.Fatalf("layers %q, want %q", got, want)
	}
	if !strings.Contains(ls[0].Detail, "kvcanary checksum compare") || !strings.Contains(ls[1].Detail, "2 live-page overwrites") ||
		!strings.Contains(ls[1].Detail, "2 findings") || ls[2].Detail != "0 graph replays sampled, of an unknown number (no replay events)" {
		t.Fatalf("details %+v", ls)
	}
	// Only the analyzers that ran have a layer.
	ls = wrapLayers(analyzers.Summaries{Checksum: &checksum.Summary{Rooms: 2, Matched: 1, Mismatched: 1}},
		map[string]uint64{"room.checksum": 4}, nil, wrapSamplingIn{})
	if len(ls) != 1 || ls[0].Status != layerFinding {
		t.Fatalf("a mismatched room: %+v", ls)
	}
}

// Rooms seen on one side only were not checked: with others matched, the
// transfer layer is partial and says how many, never ok.
func TestWrapLayersOneSidedRoomsArePartial(t *testing.T) {
	ls := wrapLayers(analyzers.Summaries{Checksum: &checksum.Summary{Rooms: 8, Matched: 4, Missing: 3, Warmup: 1}},
		map[string]uint64{"room.checksum": 12}, nil, wrapSamplingIn{})
	if len(ls) != 1 || ls[0].Status != layerPartial || !strings.Contains(ls[0].Detail, "3 of 8 rooms unchecked: seen on one side only") {
		t.Fatalf("4 matched, 3 one side only: %+v, want partial naming the 3 unchecked rooms", ls)
	}
	// All rooms on both sides: ok.
	ls = wrapLayers(analyzers.Summaries{Checksum: &checksum.Summary{Rooms: 8, Matched: 7, Warmup: 1}},
		map[string]uint64{"room.checksum": 16}, nil, wrapSamplingIn{})
	if ls[0].Status != layerOK || strings.Contains(ls[0].Detail, "unchecked") {
		t.Fatalf("every room matched: %+v", ls)
	}
}

// The canary samples replays: its detail says how many of the run's
// replays it checked, and at what rate.
func TestWrapCanaryLayerSaysWhatItSampled(t *testing.T) {
	sums := analyzers.Summaries{Canary: &canary.Summary{Replays: 2, Policy: "live"}}
	ls := wrapLayers(sums, map[string]uint64{"canary.pages": 2, "replay": 102}, nil, wrapSamplingIn{canaryEvery: "64"})
	if ls[0].Status != layerOK || !strings.HasPrefix(ls[0].Detail, "2 of 102 replays checked (1 in 64) (policy live)") {
		t.Fatalf("detail %q", ls[0].Detail)
	}
	ls = wrapLayers(sums, map[string]uint64{"canary.pages": 2}, nil, wrapSamplingIn{})
	if !strings.HasPrefix(ls[0].Detail, "2 replays checked, of an unknown number (no replay events)") {
		t.Fatalf("without replay events: %q", ls[0].Detail)
	}
	for _, c := range []struct {
		env, flag, want string
	}{
		{"", "", "64"}, {"KVCANARY_CANARY_EVERY=8", "", "8"}, {"KVCANARY_CANARY_EVERY=8", "1", "1"}, {"KVCANARY_CANARY_EVERY=x", "", ""},
	} {
		o := &WrapOptions{environ: []string{"PATH=/bin"}}
		if c.env != "" {
			o.environ = append(o.environ, c.env)
		}
		if c.flag != "" {
			o.Settings = []WrapSetting{{Flag: "canary-every", Env: "KVCANARY_CANARY_EVERY", Value: c.flag}}
		}
		if got := wrapCanaryEvery(o); got != c.want {
			t.Errorf("env %q flag %q: every %q, want %q", c.env, c.flag, got, c.want)
		}
	}
}

// wrapChild is a Python producer: it reports what wrap gave it (env, the
// socket's and its directory's modes, its process group) to argv[1], sends
// two room.checksum events of one room over KVCANARY_ADDR, then per argv[3]
// exits with argv[2], or waits for SIGINT (trap: exit 0 on it; ignore: never).
const wrapChild = `import json, os, signal, socket, stat, sys, time
report, code, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
path = os.environ["KVCANARY_ADDR"][len("unix://"):]
st = os.stat(path)
rep = {"pythonpath": os.environ.get("PYTHONPATH", ""), "run": os.environ.get("KVCANARY_RUN"),
       "settings": {k: v for k, v in os.environ.items() if k.startswith("KVCANARY_") and k not in ("KVCANARY_ADDR", "KVCANARY_RUN")},
       "sock_mode": stat.S_IMODE(st.st_mode), "is_socket": stat.S_ISSOCK(st.st_mode),
       "dir_mode": stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), "own_group": os.getpgid(0) == os.getpid()}
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(path)
out = s.makefile("w", encoding="utf-8", newline="\n")
for side in ("prefill", "decode"):
    ev = {"v": 1, "kind": "room.checksum", "ts_ns": time.time_ns(), "src": {"proc": "child-" + side, "pid": os.getpid()},
          "body": {"room": "42", "side": side, "seq_len": 1000, "pages": 16, "bsum": "0x00000000deadbeef", "xxh3": "0x0123456789abcdef"}}
    out.write(json.dumps(ev) + "\n")
if mode != "noend":  # noend: ends like a killed producer, without its run.end
    out.write(json.dumps({"v": 1, "kind": "run.end", "ts_ns": time.time_ns(), "src": {"proc": "child", "pid": os.getpid()},
                          "body": {"wall_ns": 1}}) + "\n")
out.close(); s.close()
with open(report + ".tmp", "w") as f:
    json.dump(rep, f)
os.rename(report + ".tmp", report)
if mode == "trap":
    def on_int(sig, frame):
        # os.write, not print: the signal can land while the main thread is
        # inside print("ready") holding stdout's buffer lock (reentrant call).
        os.write(1, b"got signal %d\n" % sig)
        os._exit(0)
    signal.signal(signal.SIGINT, on_int)
    signal.signal(signal.SIGTERM, on_int)
elif mode == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if mode in ("trap", "ignore"):
    print("ready", flush=True)
    while True:
        signal.pause()
sys.exit(code)
`

type wrapChildReport struct {
	PythonPath string            `json:"pythonpath"`
	Run        string            `json:"run"`
	Settings   map[string]string `json:"settings"`
	SockMode   int               `json:"sock_mode"`
	IsSocket   bool              `json:"is_socket"`
	DirMode    int               `json:"dir_mode"`
	OwnGroup   bool              `json:"own_group"`
}

// wrapTest runs wrap through its cobra command with fake streams and a
// signal channel the test drives.
type wrapTest struct {
	t       *testing.T
	dir     string
	py      string
	out     *testenv.SyncBuffer
	errOut  *testenv.SyncBuffer
	sigs    chan os.Signal
	ios     *cmdutil.IOStreams
	environ []string
	setup   func(*WrapOptions)
}

func newWrapTest(t *testing.T) *wrapTest {
	w := &wrapTest{t: t, dir: t.TempDir(), out: &testenv.SyncBuffer{}, errOut: &testenv.SyncBuffer{}, sigs: make(chan os.Signal, 2)}
	w.ios = &cmdutil.IOStreams{In: &bytes.Buffer{}, Out: w.out, ErrOut: w.errOut}
	w.environ = []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=/user/site", "KVCANARY_LOG=debug", "PYTHONDONTWRITEBYTECODE=1"}
	return w
}

// python returns an interpreter for the child (stdlib only) or skips.
func (w *wrapTest) python() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	w.t.Skip("no python3 for the child producer")
	return ""
}

// childArgs is the Python child's command line; -S keeps site (and the
// package's sitecustomize, which other tests cover) out of this one.
func (w *wrapTest) childArgs(code, mode string) []string {
	script := filepath.Join(w.dir, "child.py")
	if err := os.WriteFile(script, []byte(wrapChild), 0o644); err != nil {
		w.t.Fatal(err)
	}
	return []string{w.python(), "-S", script, filepath.Join(w.dir, "report.json"), code, mode}
}

// runChild runs wrap over the Python child in mode (exit 0) in the
// background and waits, as waitingFor, until the child is ready. The
// function it returns waits for wrap to end and returns its error; if wrap
// has not ended within the hang guard, t fails saying after what.
func (w *wrapTest) runChild(mode, waitingFor string) (wait func(after string) error) {
	w.t.Helper()
	done := make(chan error, 1)
	args := append([]string{"--"}, w.childArgs("0", mode)...)
	go func() { done <- w.run(args...) }()
	testenv.WaitFor(w.t, waitingFor, func() bool { return strings.Contains(w.out.String(), "ready") })
	return func(after string) error {
		w.t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			w.t.Fatalf("wrap did not end after %s\nstdout:\n%s\nstderr:\n%s", after, w.out, w.errOut)
			return nil
		}
	}
}

func (w *wrapTest) run(args ...string) error {
	f := &cmdutil.Factory{IO: w.ios, Ctx: context.Background(), Now: time.Now}
	cmd := NewCmdWrap(f, func(o *WrapOptions) error {
		o.CacheDir = filepath.Join(w.dir, "cache")
		o.environ = w.environ
		o.signals = w.sigs
		if w.setup != nil {
			w.setup(o)
		}
		return wrapRun(o)
	})
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(w.errOut)
	cmd.SilenceErrors = true // main prints errors, and never a silent exit's
	return cmd.Execute()
}

func (w *wrapTest) report() wrapChildReport {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "report.json"))
	if err != nil {
		w.t.Fatalf("child report: %v\nstderr:\n%s", err, w.errOut)
	}
	var r wrapChildReport
	if err := json.Unmarshal(b, &r); err != nil {
		w.t.Fatal(err)
	}
	return r
}

func TestWrapRecordsChildAndPropagatesExit(t *testing.T) {
	w := newWrapTest(t)
	bundle := filepath.Join(w.dir, "decode.kvtrace")
	args := append([]string{"--record", bundle, "--json", "--run", "r-test", "--canary-policy", "sweep:4", "--graphdiff-logits", "none", "--"},
		w.childArgs("7", "exit")...)
	err := w.run(args...)
	if cmdutil.ExitCode(err) != 7 {
		t.Fatalf("child exited 7, wrap: %v (exit %d)\nstderr:\n%s", err, cmdutil.ExitCode(err), w.errOut)
	}

	rep := w.report()
	first, rest, _ := strings.Cut(rep.PythonPath, ":")
	if filepath.Dir(first) != filepath.Join(w.dir, "cache") || !strings.HasPrefix(filepath.Base(first), "pyhook-") || rest != "/user/site" {
		t.Errorf("PYTHONPATH %q: want the extracted package first, then the user's", rep.PythonPath)
	}
	if _, err := os.Stat(filepath.Join(first, "sitecustomize.py")); err != nil {
		t.Errorf("PYTHONPATH's first entry lacks sitecustomize.py: %v", err)
	}
	if rep.Run != "r-test" {
		t.Errorf("KVCANARY_RUN %q", rep.Run)
	}
	want := map[string]string{"KVCANARY_CANARY_POLICY": "sweep:4", "KVCANARY_GRAPHDIFF_LOGITS": "none", "KVCANARY_LOG": "debug"}
	if len(rep.Settings) != len(want) {
		t.Errorf("settings %v, want exactly %v (flags not given set nothing)", rep.Settings, want)
	}
	for k, v := range want {
		if rep.Settings[k] != v {
			t.Errorf("%s=%q, want %q", k, rep.Settings[k], v)
		}
	}
	if !rep.IsSocket || rep.SockMode != 0o600 || rep.DirMode != 0o700 || !rep.OwnGroup {
		t.Errorf("socket %v mode %o in dir mode %o, own process group %v; want a 0600 socket in a 0700 dir, own group",
			rep.IsSocket, rep.SockMode, rep.DirMode, rep.OwnGroup)
	}

	// --json: one object on stdout, the verdicts of the three layers.
	var sum WrapSummary
	if err := json.Unmarshal([]byte(w.out.String()), &sum); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, w.out)
	}
	if sum.ExitCode != 7 || sum.Run != "r-test" || sum.ByKind["room.checksum"] != 2 || sum.Recorded < 2 || sum.Dropped != 0 {
		t.Fatalf("summary %+v", sum)
	}
	var layers []string
	for _, l := range sum.Layers {
		layers = append(layers, l.Layer+"="+l.Status)
	}
	if got := strings.Join(layers, " "); got != "transfer=ok buffer=not measured compute=not measured" {
		t.Fatalf("layers %s", got)
	}

	// The bundle holds the child's events, with the run id from KVCANARY_RUN.
	rec := readBundle(t, bundle)
	m := rec.Manifest
	if m.Run != "r-test" || m.Config.Engine != "sglang" || m.Config.CUDAGraph != nil || m.Labels["KVCANARY_CANARY_POLICY"] != "sweep:4" {
		t.Fatalf("manifest %+v", m)
	}
	sides := map[string]bool{}
	for _, ev := range rec.Events {
		switch b := ev.Body.(type) {
		case *hook.RoomChecksum:
			if ev.Run != "r-test" || !strings.HasPrefix(ev.Src.Proc, "child-") {
				t.Errorf("event %+v", ev)
			}
			sides[string(b.Side)] = true
		case *hook.RunStart:
			if b.Config.CUDAGraph != nil || b.Config.MultiStreamOverlap != nil {
				t.Errorf("run.start with cuda_graph unstated says %v/%v: want unknown (nil)", b.Config.CUDAGraph, b.Config.MultiStreamOverlap)
			}
		}
	}
	if !sides["prefill"] || !sides["decode"] {
		t.Fatalf("bundle lacks the child's events: %v", sides)
	}
	if rec.Footer == nil {
		t.Fatal("bundle not closed cleanly")
	}
}

func TestWrapForwardsSIGINT(t *testing.T) {
	w := newWrapTest(t)
	w.setup = func(o *WrapOptions) { o.progressEvery = 10 * time.Millisecond }
	wait := w.runChild("trap", "the child's signal handler")
	// Plain progress lines on stderr while the command runs.
	testenv.WaitFor(t, "a progress line", func() bool {
		return strings.Contains(w.errOut.String(), "wrap: 3 events (run.end 1, room.checksum 2); 0 producers connected (1 connection so far); 0 rejected\n")
	})
	w.sigs <- syscall.SIGINT
	// The child handled SIGINT and exited 0: wrap exits with its status.
	if err := wait("SIGINT"); err != nil {
		t.Fatalf("wrap: %v\nstderr:\n%s", err, w.errOut)
	}
	if !strings.Contains(w.out.String(), "got signal 2") {
		t.Fatalf("the child never saw SIGINT:\n%s", w.out)
	}
	wantContains(t, "stderr", w.errOut.String(), "forwarded SIGINT to the command's process group", "the command exited with status 0",
		"transfer (checksum)", "buffer (canary)      not measured  0 replays checked, of an unknown number (no replay events) (1 in 64)",
		"compute (graphdiff)  not measured  0 graph replays sampled, of an unknown number (no replay events) (1 in 256)", "3 events (run.end 1, room.checksum 2) from 1 producer connection; 0 rejected")
}

// TestWrapForwardsHangupAsTerm: a closed terminal (SIGHUP) must not end
// wrap alone and orphan the engine in its own process group: the command
// gets SIGTERM.
func TestWrapForwardsHangupAsTerm(t *testing.T) {
	w := newWrapTest(t)
	wait := w.runChild("trap", "the child's signal handler")
	w.sigs <- syscall.SIGHUP
	if err := wait("SIGHUP"); err != nil {
		t.Fatalf("wrap: %v\nstderr:\n%s", err, w.errOut)
	}
	if !strings.Contains(w.out.String(), "got signal 15") {
		t.Fatalf("the child did not get SIGTERM:\n%s\nstderr:\n%s", w.out, w.errOut)
	}
}

func TestWrapSecondSignalKills(t *testing.T) {
	w := newWrapTest(t)
	wait := w.runChild("ignore", "the child ignoring SIGINT")
	w.sigs <- syscall.SIGINT
	w.sigs <- syscall.SIGINT
	if err := wait("two signals"); cmdutil.ExitCode(err) != 128+9 {
		t.Fatalf("wrap: %v (exit %d), want 137 (SIGKILL)\nstderr:\n%s", err, cmdutil.ExitCode(err), w.errOut)
	}
	if !strings.Contains(w.errOut.String(), "killed the command's process group") {
		t.Fatalf("stderr:\n%s", w.errOut)
	}
}

func TestWrapExitStatus(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		script string
		code   int
		says   string
	}{
		{"exit 0", 0, "exited with status 0"},
		{"exit 7", 7, "exited with status 7"},
		{"kill -TERM $$", 128 + 15, "was killed by SIGTERM (exit 143)"},
		{"kill -KILL $$", 128 + 9, "was killed by SIGKILL (exit 137)"},
	} {
		w := newWrapTest(t)
		err := w.run("--", sh, "-c", tc.script)
		if cmdutil.ExitCode(err) != tc.code {
			t.Errorf("%q: wrap %v (exit %d), want %d", tc.script, err, cmdutil.ExitCode(err), tc.code)
		}
		var ee *cmdutil.ExitError
		if tc.code != 0 && (!errors.As(err, &ee) || ee.Err != nil) {
			t.Errorf("%q: %v; want a silent exit (the command's status is no kvcanary error)", tc.script, err)
		}
		for _, want := range []string{tc.says, "transfer (checksum)", "not measured  no room.checksum events"} {
			if !strings.Contains(w.errOut.String(), want) {
				t.Errorf("%q: stderr lacks %q:\n%s", tc.script, want, w.errOut)
			}
		}
	}
}

func TestWrapCommandNotFound(t *testing.T) {
	w := newWrapTest(t)
	bundle := filepath.Join(w.dir, "x.kvtrace")
	err := w.run("--record", bundle, "--", "kvcanary-no-such-command", "--flag")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), `cannot start the command: exec: "kvcanary-no-such-command": executable file not found`) {
		t.Fatalf("err %v (exit %d), want exit 3 naming the command", err, cmdutil.ExitCode(err))
	}
	if _, serr := os.Stat(bundle); !os.IsNotExist(serr) {
		t.Fatalf("bundle created for a command that never ran: %v", serr)
	}
	notExec := filepath.Join(w.dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = w.run("--", notExec)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("not executable: %v (exit %d)", err, cmdutil.ExitCode(err))
	}
}

// With --watch the dashboard gets the events live (and the run.start, the
// engine's flags being stated), the command's output goes to --log.
func TestWrapWatch(t *testing.T) {
	w := newWrapTest(t)
	w.ios.SetTTY(true, true)
	var seen []hook.Kind
	w.setup = func(o *WrapOptions) {
		o.runTUI = func(ctx context.Context, opts tui.Options) (tui.Stats, error) {
			for {
				ev, ok := opts.Sub.Recv()
				if !ok {
					break
				}
				seen = append(seen, ev.Kind)
			}
			return tui.Stats{Events: uint64(len(seen))}, <-opts.Done
		}
	}
	logPath := filepath.Join(w.dir, "server.log")
	args := append([]string{"--watch", "--log", logPath, "--config", "cuda_graph=on", "--config", "multi_stream_overlap=off", "--"},
		w.childArgs("0", "exit")...)
	if err := w.run(args...); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, w.errOut)
	}
	count := map[hook.Kind]int{}
	for _, k := range seen {
		count[k]++
	}
	if count[hook.KindRunStart] != 1 || count[hook.KindRoomChecksum] != 2 {
		t.Fatalf("dashboard saw %v", count)
	}
	if w.out.String() != "" {
		t.Fatalf("the command wrote to the dashboard's terminal: %q", w.out)
	}
	if !strings.Contains(w.errOut.String(), "watch: 4 events shown") {
		t.Fatalf("stderr:\n%s", w.errOut)
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("no command log: %v", err)
	}

	w = newWrapTest(t)
	err := w.run("--watch", "--", "true")
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "needs a terminal") {
		t.Fatalf("--watch without a terminal: %v", err)
	}
}

// A producer outliving the command (a scheduler process left behind) is
// waited for up to --drain, then reported, never waited for forever.
func TestWrapReportsLingeringProducer(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	w := newWrapTest(t)
	py := w.python()
	holder := filepath.Join(w.dir, "holder.py")
	if err := os.WriteFile(holder, []byte(`import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["KVCANARY_ADDR"][len("unix://"):])
for side in ("prefill", "decode"):
    s.sendall(('{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":"42","side":"%s","seq_len":1000,"pages":16,'
               '"bsum":"0x00000000deadbeef","xxh3":"0x0123456789abcdef"}}\n' % side).encode())
print("connected", flush=True)
time.sleep(120)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	parent := filepath.Join(w.dir, "parent.py")
	if err := os.WriteFile(parent, []byte(`import subprocess, sys
p = subprocess.Popen([sys.executable, "-S", sys.argv[1]], stdout=subprocess.PIPE)
p.stdout.readline()
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var pgids []int
	w.setup = func(o *WrapOptions) { o.started = func(pid int) { pgids = append(pgids, pid) } }
	t.Cleanup(func() {
		for _, g := range pgids {
			syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	if err := w.run("--drain", "300ms", "--", py, "-S", parent, holder); err != nil {
		t.Fatalf("%v\n%s", err, w.errOut)
	}
	wantContains(t, "stderr", w.errOut.String(), "processes of its group", "still run", "1 producer still connected 300ms after the command exited")
	// --json counts them in the summary.
	w.out.Reset()
	if err := w.run("--json", "--drain", "300ms", "--", py, "-S", parent, holder); err != nil {
		t.Fatalf("%v\n%s", err, w.errOut)
	}
	var sum WrapSummary
	if err := json.Unmarshal([]byte(w.out.String()), &sum); err != nil || sum.CutOff != 1 {
		t.Fatalf("summary %+v (%v), want producers_cut_off 1:\n%s", sum, err, w.out)
	}
	// The transfer layer the cut-off producer fed is partial, not ok.
	if sum.Layers[0].Status != layerPartial || sum.WithoutRunEnd != 1 {
		t.Fatalf("cut off after its room checksums: transfer %+v, without run.end %d; want partial, 1", sum.Layers[0], sum.WithoutRunEnd)
	}
}

// A producer that sent events and ended without its run.end (here: it never
// sends one, as a SIGKILLed pyhook cannot) leaves every layer it could have
// fed partial, and wrap names it.
func TestWrapProducerWithoutRunEndIsPartial(t *testing.T) {
	w := newWrapTest(t)
	err := w.run(append([]string{"--"}, w.childArgs("0", "noend")...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, w.errOut)
	}
	wantContains(t, "stderr", w.errOut.String(), "wrap: 1 producer ended without run.end (killed? cut off?): what they dropped or disabled is unknown: child-prefill pid",
		"transfer (checksum)  partial", "1 producer ended without run.end")
	w.errOut.Reset()
	if err := w.run(append([]string{"--"}, w.childArgs("0", "exit")...)...); err != nil {
		t.Fatalf("%v\n%s", err, w.errOut)
	}
	wantContains(t, "stderr", w.errOut.String(), "transfer (checksum)  ok")
	if strings.Contains(w.errOut.String(), "without run.end") {
		t.Fatalf("a producer that sent its run.end:\n%s", w.errOut)
	}
}

// End to end on the stand-in of SGLang (runtime/pyhook/tests/standin): the
// embedded package hooks the engine's processes through sitecustomize,
// wrap judges what they send, and checksum compare agrees on the bundle.
func TestWrapStandInEngine(t *testing.T) {
	t.Parallel() // its own processes, ports and temp dirs: it mostly waits on them
	engine, err := filepath.Abs("../../runtime/pyhook/tests/standin/engine.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(engine); err != nil {
		t.Skipf("the stand-in engine is not in this tree: %v", err)
	}
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch (Debian's python3-torch): %v %s", py, err, out)
	}
	for _, tc := range []struct {
		fault    string
		transfer string
		compare  int
	}{
		{"none", "transfer=ok buffer=ok compute=ok", cmdutil.ExitOK},
		{"transfer-corrupt", "transfer=finding buffer=ok compute=ok", cmdutil.ExitFinding},
	} {
		w := newWrapTest(t)
		w.environ = []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + filepath.Dir(engine), "PYTHONDONTWRITEBYTECODE=1"}
		bundle := filepath.Join(w.dir, tc.fault+".kvtrace")
		err := w.run("--json", "--record", bundle, "--canary-every", "1", "--graphdiff-every", "2", "--",
			py, engine, "--quiet", "--fault", tc.fault)
		if err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s", tc.fault, err, w.errOut)
		}
		var sum WrapSummary
		if err := json.Unmarshal([]byte(w.out.String()), &sum); err != nil {
			t.Fatalf("%s: %v\n%s", tc.fault, err, w.out)
		}
		var layers []string
		for _, l := range sum.Layers {
			layers = append(layers, l.Layer+"="+l.Status)
		}
		if got := strings.Join(layers, " "); got != tc.transfer || sum.Dropped != 0 || sum.Rejected != 0 {
			t.Errorf("%s: layers %s, dropped %d, rejected %d; want %s, nothing lost\nstderr:\n%s", tc.fault, got, sum.Dropped, sum.Rejected, tc.transfer, w.errOut)
		}
		c := newTestCLI()
		if code := cmdutil.ExitCode(c.exec(NewCmdRoot(c.F), "checksum", "compare", bundle)); code != tc.compare {
			t.Errorf("%s: checksum compare of the bundle exits %d, want %d", tc.fault, code, tc.compare)
		}
	}
}

// TestWrapPartialLayers: a layer whose instrument a producer reported off,
// or any layer when producers lost evidence, is "partial", never "ok".
func TestWrapPartialLayers(t *testing.T) {
	base := func() []WrapLayer {
		return []WrapLayer{
			{Layer: "transfer", Analyzer: checksum.AnalyzerName, Status: layerOK},
			{Layer: "buffer", Analyzer: canary.AnalyzerName, Status: layerOK},
			{Layer: "compute", Analyzer: graphdiff.AnalyzerName, Status: layerNotMeasured},
		}
	}
	status := func(ls []WrapLayer) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.Status)
		}
		return out
	}
	lostOf := func(notes ...string) map[string][]string {
		m := map[string][]string{}
		for _, n := range notes {
			for _, a := range analyzers.NoteAnalyzers(n) {
				m[a] = append(m[a], n)
			}
		}
		return m
	}
	for _, c := range []struct {
		notes      []string
		dropped    bool
		withoutEnd uint64
		want       []string
	}{
		{nil, false, 0, []string{layerOK, layerOK, layerNotMeasured}},
		{[]string{"canary.replay off: target missing: sglang…_forward_raw"}, false, 0, []string{layerOK, layerPartial, layerNotMeasured}},
		{[]string{"replay.step off: 3 errors at x"}, false, 0, []string{layerOK, layerPartial, layerNotMeasured}},
		{[]string{"checksum.sent off: patch failed: boom"}, false, 0, []string{layerPartial, layerOK, layerNotMeasured}},
		// what the pyhook writes when the index-K of rooms was on the host
		{[]string{"4 room checksums skipped (index-K on the host)"}, false, 0, []string{layerPartial, layerOK, layerNotMeasured}},
		{nil, true, 0, []string{layerPartial, layerPartial, layerNotMeasured}},
		{[]string{"4 instrument errors"}, false, 0, []string{layerPartial, layerPartial, layerNotMeasured}},
		{[]string{"run.end report failed: x"}, false, 0, []string{layerPartial, layerPartial, layerNotMeasured}},
		{[]string{"something this wrap does not know"}, false, 0, []string{layerPartial, layerPartial, layerNotMeasured}},
		// DeepSeek-V4: the between phase has no writer to expect; top-k capture is on: nothing lost
		{[]string{"canary.between off: not applicable: DeepSeekV4TokenToKVPool has no IndexKeyCache.move",
			"graphdiff.topk on: kvcanary installed an indexer top-k capturer"}, false, 0, []string{layerOK, layerOK, layerNotMeasured}},
		// "on:" in a note that names no feature is not informational
		{[]string{"switched on: x"}, false, 0, []string{layerPartial, layerPartial, layerNotMeasured}},
		// producers killed before their run.end: what they lost is unknown
		{nil, false, 2, []string{layerPartial, layerPartial, layerNotMeasured}},
	} {
		ls := base()
		markPartial(ls, lostOf(c.notes...), c.dropped, c.withoutEnd, nil)
		if got := status(ls); !slices.Equal(got, c.want) {
			t.Errorf("notes %q dropped %v without run.end %d: %v, want %v", c.notes, c.dropped, c.withoutEnd, got, c.want)
		}
		if c.withoutEnd > 0 && !strings.Contains(ls[0].Detail, "2 producers ended without run.end (killed? cut off?): what they dropped or disabled is unknown") {
			t.Errorf("detail %q", ls[0].Detail)
		}
	}
	// a TP rank that never reported: every measured layer is partial, and says which rank
	ls := base()
	markPartial(ls, nil, false, 0, []string{"decode rank 1 of 2 never reported"})
	if got := status(ls); !slices.Equal(got, []string{layerPartial, layerPartial, layerNotMeasured}) {
		t.Errorf("silent rank: %v", got)
	}
	if !strings.Contains(ls[1].Detail, "decode rank 1 of 2 never reported") {
		t.Errorf("silent rank detail %q", ls[1].Detail)
	}
}

// The engine's own settings, a contradicted --config and a silent rank are
// printed, each on its own line, with both values of a contradiction.
func TestWrapSummaryShowsEngineSettingsContradictionsAndSilentRanks(t *testing.T) {
	var m runconfig.EngineMerge
	rc, err := wrapRunConfig("sglang", []string{"multi_stream_overlap=off"})
	if err != nil {
		t.Fatal(err)
	}
	rep := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(true), TPSize: 2,
		Provenance: map[string]string{"multi_stream_overlap": hook.ProvEngine, "tp_size": hook.ProvEngine}}
	cs := m.Merge(&rc, rep, "decode", "decode rank 0")
	var b bytes.Buffer
	if err := writeWrapSummary(&b, WrapSummary{Config: rc, Contradictions: cs, SilentRanks: []string{"decode rank 1 of 2 never reported"}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"wrap: engine settings: multi_stream_overlap=true (engine), tp_size=2 (engine)\n",
		"wrap: CONTRADICTION: multi_stream_overlap: label (--config) says false, the engine (decode rank 0) reports true; using true\n",
		"wrap: decode rank 1 of 2 never reported (no event from it: did it load kvcanary's hooks?)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// wrap's tally merges each engine process's run.start into the run's
// configuration and knows which TP ranks reported.
func TestWrapTallyMergesEngineReportsAndFindsSilentRanks(t *testing.T) {
	rc, err := wrapRunConfig("sglang", []string{"multi_stream_overlap=off"})
	if err != nil {
		t.Fatal(err)
	}
	var passed int
	tally := &wrapTally{findings: map[string]int{}, config: rc, ranks: analyzers.NewCoverageCollector(),
		next: hook.PublishFunc(func(hook.Event) { passed++ })}
	tally.Publish(hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "kvcanary-wrap"}, Body: &hook.RunStart{Config: rc}})
	rank0 := 0
	rep := hook.RunConfig{Engine: "sglang", MultiStreamOverlap: hook.Bool(true), CUDAGraph: hook.Bool(true), TPSize: 2,
		Provenance: map[string]string{"multi_stream_overlap": hook.ProvEngine, "cuda_graph": hook.ProvEngine, "tp_size": hook.ProvEngine}}
	tally.Publish(hook.Event{Kind: hook.KindRunStart, Src: hook.Source{Proc: "python3", Role: "decode"}, Body: &hook.RunStart{Config: rep, TPRank: &rank0}})
	tally.Publish(hook.Event{Kind: hook.KindReplay, Src: hook.Source{Proc: "python3", Role: "decode"}, Body: &hook.Replay{}})
	if passed != 3 {
		t.Errorf("%d events passed on, want 3", passed)
	}
	c := tally.config
	if c.CUDAGraph == nil || !*c.CUDAGraph || !*c.MultiStreamOverlap || c.Provenance["cuda_graph"] != hook.ProvEngine {
		t.Errorf("config %+v", c)
	}
	if len(tally.contradictions) != 1 || tally.contradictions[0].Setting != "multi_stream_overlap" {
		t.Errorf("contradictions %+v", tally.contradictions)
	}
	if got := tally.ranks.SilentRanks(); !slices.Equal(got, []string{"decode rank 1 of 2 never reported"}) {
		t.Errorf("silent %q", got)
	}
	tally.Publish(hook.Event{Kind: hook.KindRoomChecksum, Src: hook.Source{Proc: "python3", Role: "decode", Rank: 1}, Body: &hook.RoomChecksum{}})
	if got := tally.ranks.SilentRanks(); len(got) != 0 {
		t.Errorf("silent %q after rank 1 reported", got)
	}
}
