//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/canary"
	"github.com/kvcanary/kvcanary/graphdiff"
	"github.com/kvcanary/kvcanary/internal/analyzers"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/tui"
)

// A short run that the default --graphdiff-every never samples (the
// stand-in's 17 steps, 6 of them graph replays, on 2 ranks) says how much
// there was to sample and the flag that samples it; it does not read as a
// bare "no events".
func TestWrapComputeLayerSaysWhatItSampled(t *testing.T) {
	var got []hook.Event
	tally := &wrapTally{findings: map[string]int{}, next: hook.PublishFunc(func(ev hook.Event) { got = append(got, ev) })}
	for rank := range int32(2) {
		src := hook.Source{Proc: "scheduler", PID: 100 + rank, Role: "decode", Rank: rank}
		for step := uint64(0); step < 17; step++ {
			mode := "eager"
			if step >= 11 {
				mode = "graph"
			}
			tally.Publish(hook.Event{Kind: hook.KindReplay, Src: src, Body: &hook.Replay{Step: step, BatchSize: 1, Mode: mode}})
		}
	}
	if tally.graphReplays != 12 || tally.sampledReplays != 0 || len(got) != 34 {
		t.Fatalf("tally: %d graph replays, %d sampled, %d passed on; want 12, 0, 34", tally.graphReplays, tally.sampledReplays, len(got))
	}
	byKind := map[string]uint64{"replay": 34}
	in := wrapSamplingIn{canaryEvery: "64", graphdiffEvery: "256", graphReplays: tally.graphReplays, sampledReplays: tally.sampledReplays}
	sums := analyzers.Summaries{Canary: &canary.Summary{Policy: "live"}, Graphdiff: &graphdiff.Summary{}}
	ls := wrapLayers(sums, byKind, nil, in)
	compute, buffer := ls[1], ls[0]
	if compute.Status != layerNotMeasured ||
		compute.Detail != "0 of 12 graph replays sampled (1 in 256): a run this short needs a denser rate, e.g. --graphdiff-every 1" {
		t.Fatalf("compute %q %q", compute.Status, compute.Detail)
	}
	if s := compute.Sampling; s == nil || s.Sampled != 0 || s.Of != 12 || !s.OfKnown || s.Every != "256" {
		t.Fatalf("compute sampling %+v", s)
	}
	if buffer.Status != layerNotMeasured || !strings.HasPrefix(buffer.Detail, "0 of 34 replays checked (1 in 64): a run this short needs a denser rate, e.g. --canary-every 1") {
		t.Fatalf("buffer %q %q", buffer.Status, buffer.Detail)
	}

	// Sampled: each producer's step counts once, however many requests it held.
	for rank := range int32(2) {
		src := hook.Source{Proc: "scheduler", PID: 100 + rank, Role: "decode", Rank: rank}
		for _, step := range []uint64{12, 12, 12, 14, 14, 16} {
			tally.Publish(hook.Event{Kind: hook.KindGraphDiffSample, Src: src, Body: &hook.GraphDiffSample{Step: step, Request: "r"}})
		}
	}
	if tally.sampledReplays != 6 {
		t.Fatalf("sampled replays %d, want 6 (steps 12, 14, 16 on 2 ranks)", tally.sampledReplays)
	}
	in.graphdiffEvery, in.sampledReplays = "2", tally.sampledReplays
	ls = wrapLayers(analyzers.Summaries{Graphdiff: &graphdiff.Summary{Samples: 12}}, map[string]uint64{"replay": 34, "graphdiff.sample": 12}, nil, in)
	if ls[0].Status != layerOK || !strings.HasPrefix(ls[0].Detail, "6 of 12 graph replays sampled (1 in 2): 12 samples, 0 divergent") {
		t.Fatalf("sampled: %q %q", ls[0].Status, ls[0].Detail)
	}

	// Every replay eager: nothing to compare, and no flag helps.
	ls = wrapLayers(analyzers.Summaries{Graphdiff: &graphdiff.Summary{}}, byKind, nil, wrapSamplingIn{graphdiffEvery: "1"})
	if !strings.HasPrefix(ls[0].Detail, "0 of 0 graph replays sampled (1 in 1): every replay ran eagerly") {
		t.Fatalf("all eager: %q", ls[0].Detail)
	}
	// Switched off: says so rather than suggesting a rate.
	ls = wrapLayers(analyzers.Summaries{Graphdiff: &graphdiff.Summary{}}, byKind, nil, wrapSamplingIn{graphdiffEvery: "256", graphdiffOff: true, graphReplays: 12})
	if ls[0].Detail != "graph-vs-eager was off (--instruments without graphdiff)" {
		t.Fatalf("off: %q", ls[0].Detail)
	}
	o := &WrapOptions{environ: []string{"KVCANARY_INSTRUMENTS=checksum,canary"}}
	if wrapInstrumentOn(o, "graphdiff") || !wrapInstrumentOn(o, "canary") || wrapSettingValue(o, "KVCANARY_GRAPHDIFF_EVERY") != "256" {
		t.Fatalf("settings from the environment: graphdiff on %v, canary on %v, every %q",
			wrapInstrumentOn(o, "graphdiff"), wrapInstrumentOn(o, "canary"), wrapSettingValue(o, "KVCANARY_GRAPHDIFF_EVERY"))
	}
}

// A zombie left in the command's process group (exited, not yet reaped by
// init) is not a process that "still runs": kill(-pgid, 0) finds it, wrap
// must not.
func TestGroupAliveIgnoresZombies(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc to tell zombies apart: %v", err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	pid := cmd.Process.Pid
	defer cmd.Wait()
	if !groupAlive(pid) {
		t.Fatal("a sleeping process: its group is not alive")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	// Not reaped (no Wait yet): a zombie.
	testenv.WaitFor(t, "the killed process to become a zombie", func() bool {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return false
		}
		i := strings.LastIndexByte(string(b), ')')
		return i > 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
	})
	if syscall.Kill(-pid, 0) != nil {
		t.Skip("this kernel does not find zombies with kill(-pgid, 0): nothing to tell apart")
	}
	if groupAlive(pid) {
		t.Fatal("a group holding only a zombie reads as still running")
	}
	if groupLingers(pid, 50*time.Millisecond) {
		t.Fatal("groupLingers: a zombie lingers")
	}
}

// Under --watch the dashboard owns the terminal until it closes: wrap
// prints nothing on stderr meanwhile (not the producers cut off by --drain,
// not the processes its group left behind); the summary after it says both.
func TestWrapWatchPrintsNothingOverTheDashboard(t *testing.T) {
	w := newWrapTest(t)
	w.ios.SetTTY(true, true)
	py := w.python()
	holder := filepath.Join(w.dir, "holder.py")
	if err := os.WriteFile(holder, []byte(`import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(os.environ["KVCANARY_ADDR"][len("unix://"):])
s.sendall(b'{"v":1,"kind":"room.checksum","ts_ns":1,"body":{"room":"42","side":"prefill","seq_len":1000,"pages":16,"bsum":"0x00000000deadbeef","xxh3":"0x0123456789abcdef"}}\n')
sys.stdout.write("connected\n"); sys.stdout.flush()
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
	var during string
	w.setup = func(o *WrapOptions) {
		o.started = func(pid int) { pgids = append(pgids, pid) }
		o.runTUI = func(ctx context.Context, opts tui.Options) (tui.Stats, error) {
			before := len(w.errOut.String())
			for {
				if _, ok := opts.Sub.Recv(); !ok {
					break
				}
			}
			err := <-opts.Done
			during = w.errOut.String()[before:]
			return tui.Stats{}, err
		}
	}
	t.Cleanup(func() {
		for _, g := range pgids {
			syscall.Kill(-g, syscall.SIGKILL)
		}
	})
	if err := w.run("--watch", "--log", filepath.Join(w.dir, "cmd.log"), "--drain", "300ms", "--", py, "-S", parent, holder); err != nil {
		t.Fatalf("%v\n%s", err, w.errOut)
	}
	if during != "" {
		t.Fatalf("printed over the dashboard:\n%s", during)
	}
	wantContains(t, "stderr after the dashboard", w.errOut.String(), "processes of its group", "still run",
		"1 producer cut off by --drain")
}
