package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

func TestCollectFlags(t *testing.T) {
	wantOptions(t, NewCmdCollect, []string{"--listen", "unix:///tmp/x.sock", "--record", "out.kvtrace", "--allow-remote", "--json", "--run", "r9"}, func(o *CollectOptions) bool {
		return o.Listen == "unix:///tmp/x.sock" && o.Record == "out.kvtrace" && o.AllowRemote && o.JSON.JSON && o.Run == "r9"
	})
	wantUsage(t, NewCmdCollect) // missing --listen
}

func TestCollectRefusesRemoteWithoutFlag(t *testing.T) {
	ios, _, _, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Listen: "tcp://0.0.0.0:0"}
	err := collectRun(opts)
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "--allow-remote") {
		t.Fatalf("err = %v (exit %d), stderr %q", err, cmdutil.ExitCode(err), errOut)
	}
}

func TestCollectBadListenIsUsageError(t *testing.T) {
	// Issue 27 D18: a port out of range and a host that does not resolve
	// (127.1) were exit 3 from the listen.
	for _, addr := range []string{"foo://x", "unix://", "tcp://nohostport", "tcp://127.0.0.1:99999", "tcp://:99999", "tcp://127.1:9000"} {
		ios, _, _, _ := cmdutil.Test()
		opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now},
			JSON: &cmdutil.JSONFlags{}, Listen: addr}
		err := collectRun(opts)
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), strconv.Quote(addr)) && !strings.Contains(err.Error(), addr) {
			t.Errorf("--listen %s: err = %v (exit %d), want a usage error naming the address", addr, err, cmdutil.ExitCode(err))
		}
	}
}

// runCollect starts collectRun in the background and returns the collector
// once it listens, and a stop function returning collectRun's error.
func runCollect(t *testing.T, opts *CollectOptions) (*hook.Collector, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts.Factory.Ctx = ctx
	ready := make(chan *hook.Collector, 1)
	opts.ready = func(c *hook.Collector) { ready <- c }
	done := make(chan error, 1)
	go func() { done <- collectRun(opts) }()
	select {
	case c := <-ready:
		return c, func() error { cancel(); return <-done }
	case err := <-done:
		cancel()
		t.Fatalf("collect ended before listening: %v", err)
	}
	return nil, nil
}

// stopCollectJSON stops a collect --json that runCollect started and returns
// its summary from out; a failed run or a summary that does not decode fails
// t.
func stopCollectJSON(t *testing.T, stop func() error, out, errOut *bytes.Buffer) CollectSummary {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatalf("collect: %v\n%s", err, errOut)
	}
	var sum CollectSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("collect --json: %v\n%s", err, out)
	}
	return sum
}

// TestCollectRecordsTwoProducers is the "done when": a Go emitter and
// a JSON-lines writer at once, recorded into a bundle that trace inspect (and
// zstdcat | jq, when installed) read.
func TestCollectRecordsTwoProducers(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "c.sock")
	bundle := filepath.Join(dir, "out.kvtrace")
	ios, _, out, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now},
		JSON: &cmdutil.JSONFlags{JSON: true}, Listen: "unix://" + sock, Record: bundle, Run: "r-collect"}
	c, stop := runCollect(t, opts)

	const nGo, nJSON = 3000, 1000
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		em, err := hook.Dial("unix://"+sock, hook.DialOptions{FlushTimeout: time.Minute})
		if err != nil {
			t.Error(err)
			return
		}
		for i := range nGo {
			em.Emit(hook.Event{Kind: hook.KindReplay, TS: int64(1 + i), Body: &hook.Replay{Step: uint64(i), Mode: "graph"}})
		}
		em.Emit(hook.Event{Kind: hook.KindRunEnd, TS: nGo + 1, Body: &hook.RunEnd{Dropped: 7}})
		em.Close()
	}()
	go func() {
		defer wg.Done()
		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Error(err)
			return
		}
		defer nc.Close()
		for i := range nJSON {
			line, _ := json.Marshal(hook.Event{Kind: hook.KindSession, TS: int64(1 + i), Body: &hook.Session{ID: "s", Outcome: "done", Rounds: i}})
			nc.Write(append(line, '\n'))
		}
		nc.Write([]byte(`{"v":1,"kind":"sched","ts_ns":1,"body":{"token_usage":NaN}}` + "\n"))
	}()
	wg.Wait()
	testenv.WaitForState(t, "every event and the rejected one", func() bool {
		return c.Stats().Events >= nGo+nJSON+1 && c.Stats().Rejected >= 1
	}, func() any { return c.Stats() })
	sum := stopCollectJSON(t, stop, out, errOut)
	if sum.Events != nGo+nJSON+1 || sum.ByKind["replay"] != nGo || sum.ByKind["session"] != nJSON ||
		sum.Rejected != 1 || sum.RejectedBy["non_finite"] != 1 || sum.Recorded != sum.Events ||
		sum.DroppedProducer != 7 || sum.Dropped != 7 || sum.Connections != 2 || sum.Run != "r-collect" {
		t.Fatalf("summary %+v", sum)
	}
	if !strings.Contains(errOut.String(), "rejected line 1001") || !strings.Contains(errOut.String(), "NaN") {
		t.Errorf("stderr lacks the rejection note: %q", errOut)
	}
	s, err := traces.Inspect(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != sum.Events || s.Counts["replay"] != nGo || s.Counts["session"] != nJSON || s.Truncated || s.Manifest.Run != "r-collect" {
		t.Fatalf("bundle summary %+v", s)
	}
	// Standard tools read the bundle too.
	if _, err := exec.LookPath("zstdcat"); err != nil {
		t.Log("zstdcat not installed; skipping the zstdcat | jq check")
		return
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Log("jq not installed; skipping the zstdcat | jq check")
		return
	}
	res, err := exec.Command("sh", "-c", `zstdcat "$1" | jq -s '[.[] | select(.kind == "replay" and .src.pid > 0 and .run == "r-collect")] | length'`, "sh", bundle).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("zstdcat | jq: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	if strings.TrimSpace(string(res)) != "3000" {
		t.Fatalf("zstdcat | jq counted %q replay events with src and run filled", res)
	}
}

func TestCollectTextReport(t *testing.T) {
	dir := t.TempDir()
	ios, _, out, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Listen: "unix://" + filepath.Join(dir, "c.sock")}
	c, stop := runCollect(t, opts)
	nc, err := net.Dial("unix", strings.TrimPrefix(c.Addr(), "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte(hook.FramePreamble))
	frame, _ := hook.AppendFrame(nil, hook.Event{Kind: hook.KindReplay, Body: &hook.Replay{Mode: "graph"}})
	nc.Write(frame)
	nc.Write([]byte{0, 0, 0, 0x40}) // a 1 GB length prefix: framing lost
	testenv.WaitFor(t, "the collector to report the lost framing", func() bool { return c.Stats().LostFraming > 0 })
	nc.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("stdout not empty without --json: %q", out)
	}
	wantContains(t, "stderr", errOut.String(), "collect: listening on unix://", "collect: 1 events from 1 connections", "by kind: replay 1",
		"rejected: 1 (bad_length 1); 1 connections closed after losing framing", "dropped: 0", "length prefix 1073741824")
	if strings.Contains(errOut.String(), "\x1b[") {
		t.Errorf("escape sequences on a non-TTY stderr: %q", errOut)
	}
}

func TestCollectProgressOnTTY(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	ios.SetTTY(false, true)
	errOut := &testenv.SyncBuffer{}
	ios.ErrOut = errOut
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Listen: "unix://" + filepath.Join(t.TempDir(), "c.sock")}
	c, stop := runCollect(t, opts)
	em, err := hook.Dial(c.Addr(), hook.DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		em.Emit(hook.Event{Kind: hook.KindReplay, Body: &hook.Replay{Step: uint64(i), Mode: hook.ModeGraph}})
	}
	em.Close()
	testenv.WaitForState(t, "a progress line on a TTY", func() bool {
		return strings.Contains(errOut.String(), "\r\x1b[Kcollect: 50 events (")
	}, func() any { return strconv.Quote(errOut.String()) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "1 open connections") && !strings.Contains(errOut.String(), "0 open connections") {
		t.Errorf("progress line lacks the connection count: %q", errOut.String())
	}
}

// The exit summary names each connection with rejections; one that never
// chose a protocol shows no empty protocol slot, and its error is quoted.
func TestWriteCollectSummaryConnections(t *testing.T) {
	var b strings.Builder
	err := writeCollectSummary(&b, CollectSummary{Listen: "unix:///x.sock", Events: 6, Rejected: 2, Conns: []hook.ConnStats{
		{ID: 1, Remote: "pid 7", Proc: "python3", Protocol: "jsonl", Events: 6, Rejected: 1, LastError: "line 2: bad"},
		{ID: 2, Remote: "pid 8", Proc: "socat", Rejected: 1, LastError: "starts with \x1b[31m"},
		{ID: 3, Remote: "pid 9", Protocol: "frames", Events: 4},
	}})
	if err != nil {
		t.Fatal(err)
	}
	out := b.String()
	wantContains(t, "summary", out,
		`connection 1 (pid 7 python3, jsonl): 6 events, 1 rejected; last: line 2: bad`,
		`connection 2 (pid 8 socat): 0 events, 1 rejected; last: `,
	)
	if strings.Contains(out, ", )") || strings.Contains(out, "\x1b") || strings.Contains(out, "connection 3") {
		t.Errorf("summary has an empty protocol slot, a raw escape, or a connection without rejections:\n%s", out)
	}
}

func TestCollectLimitFlags(t *testing.T) {
	got := mustParse(t, NewCmdCollect, "--listen", "unix:///tmp/x.sock")
	var lo hook.ListenOptions
	got.Limits.apply(&lo)
	if lo.BufferBudget != hook.DefaultBufferBudget || lo.MaxConns != hook.DefaultMaxConns || lo.IdleTimeout != hook.DefaultIdleTimeout || lo.StallTimeout != hook.DefaultStallTimeout {
		t.Fatalf("defaults: %+v", lo)
	}
	got = mustParse(t, NewCmdCollect, "--listen", "unix:///tmp/x.sock", "--buffer-budget-mib", "8", "--max-conns", "0", "--idle-timeout", "1m", "--stall-timeout", "0")
	got.Limits.apply(&lo)
	if lo.BufferBudget != 8<<20 || lo.MaxConns >= 0 || lo.IdleTimeout != time.Minute || lo.StallTimeout >= 0 {
		t.Fatalf("set: %+v (0 must mean no limit: negative in ListenOptions)", lo)
	}
	for _, bad := range [][]string{{"--max-conns", "-1"}, {"--buffer-budget-mib", "-5"}, {"--idle-timeout", "-1s"}} {
		if err := wantUsage(t, NewCmdCollect, append([]string{"--listen", "unix:///tmp/x.sock"}, bad...)...); !strings.Contains(fmt.Sprint(err), bad[0]) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	help := NewCmdCollect(newTestCLI().F, nil).Long
	for _, want := range []string{"16 MiB", "too_large", "--buffer-budget-mib 256", "--max-conns 1024", "--idle-timeout 5m", "--stall-timeout 30s"} {
		if !strings.Contains(help, want) {
			t.Errorf("collect --help lacks %q", want)
		}
	}
}

// The reproduction: a 3 MiB line of '<' was counted as an event,
// then refused by the bundle writer, and neither collect nor trace inspect
// said so. Now collect refuses it at ingest (too_large, on its connection)
// and the bundle's footer carries the refusal.
func TestCollectRefusesAtIngestWhatTheBundleCannotHold(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "out.kvtrace")
	ios, _, _, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now},
		JSON: &cmdutil.JSONFlags{}, Listen: "unix://" + filepath.Join(dir, "c.sock"), Record: bundle}
	c, stop := runCollect(t, opts)
	nc, err := net.Dial("unix", strings.TrimPrefix(c.Addr(), "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte(`{"v":1,"kind":"finding","ts_ns":1,"body":{"severity":"info","summary":"` + strings.Repeat("<", 3<<20) + `"}}` + "\n"))
	nc.Write([]byte(`{"v":1,"kind":"replay","ts_ns":2,"body":{"step":1,"bs":1,"mode":"graph","dur_ns":5}}` + "\n"))
	nc.Write([]byte(`{"v":1,"kind":"replay","ts_ns":3,"body":{"step":2,`)) // cut by the close
	nc.Close()
	testenv.WaitForState(t, "the connection to close", func() bool {
		return c.Stats().Open == 0 && c.Stats().Connections > 0
	}, func() any { return c.Stats() })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "stderr", errOut.String(), "collect: 1 events from 1 connections", "rejected: 2 (too_large 1, truncated 1)",
		"recorded: 1 events", "over the 16777216-byte limit", "2 rejected; last: ")
	s, err := traces.Inspect(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if s.Events != 1 || !s.HasFooter || s.Footer.Rejected != 2 {
		t.Fatalf("bundle: %d events, footer %+v: want 1 event and rejected 2", s.Events, s.Footer)
	}
	var b strings.Builder
	if err := writeInspect(&b, s); err != nil || !strings.Contains(b.String(), "2 rejected") {
		t.Fatalf("trace inspect does not show the refusals (%v):\n%s", err, b.String())
	}
}

func TestWriteCollectSummaryLimits(t *testing.T) {
	var b strings.Builder
	err := writeCollectSummary(&b, CollectSummary{Refused: 5, RefusedBy: map[string]uint64{"conn_limit": 4, "over_budget": 1},
		ClosedBy: map[string]uint64{"eof": 9, "idle timeout": 2, "stalled": 1}, BufferedPeak: 200, BufferBudget: 256})
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "summary", b.String(), "refused connections: 5 (conn_limit 4, over_budget 1)", "closed by a limit: idle timeout 2, stalled 1",
		"read buffers: peak 200 of the 256-byte budget")
}

func TestWatchListenLimitFlags(t *testing.T) {
	got := mustParse(t, NewCmdWatch, "--listen", "unix:///tmp/x.sock", "--max-conns", "5", "--idle-timeout", "10s", "--stall-timeout", "2s", "--buffer-budget-mib", "64")
	var lo hook.ListenOptions
	got.Limits.apply(&lo)
	if lo.MaxConns != 5 || lo.IdleTimeout != 10*time.Second || lo.StallTimeout != 2*time.Second || lo.BufferBudget != 64<<20 {
		t.Fatalf("watch --listen limits: %+v", lo)
	}
	if err := wantUsage(t, NewCmdWatch, "--bundle", "x.kvtrace", "--max-conns", "5"); !strings.Contains(fmt.Sprint(err), "--max-conns needs --listen") {
		t.Fatalf("--max-conns with --bundle: %v", err)
	}
}

// TestCollectRestartKeepsTheBundle: a collector restarted with the same
// --record path (a DaemonSet pod, a systemd unit) keeps the first run's
// bundle, whole and readable, under a name with its time, says so, and
// records the second run at the path.
func TestCollectRestartKeepsTheBundle(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "collect.kvtrace")
	var errs []string
	for i, run := range []string{"first", "second"} {
		ios, _, _, errOut := cmdutil.Test()
		opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now}, JSON: &cmdutil.JSONFlags{},
			Listen: "unix://" + filepath.Join(dir, fmt.Sprintf("c%d.sock", i)), Record: bundle, Run: run}
		c, stop := runCollect(t, opts)
		em, err := hook.Dial(c.Addr(), hook.DialOptions{FlushTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for j := range 10 * (i + 1) {
			em.Emit(hook.Event{Kind: hook.KindReplay, TS: int64(j + 1), Body: &hook.Replay{Step: uint64(j), Mode: "graph"}})
		}
		em.Close()
		testenv.WaitFor(t, "the run's events", func() bool { return c.Stats().Events >= uint64(10*(i+1)) })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		errs = append(errs, errOut.String())
	}
	if strings.Contains(errs[0], "kept as") {
		t.Errorf("first run set something aside: %q", errs[0])
	}
	_, after, ok := strings.Cut(errs[1], "held an earlier run's bundle: kept as ")
	if !ok {
		t.Fatalf("second run does not say where the first bundle went: %q", errs[1])
	}
	kept, err := strconv.Unquote(strings.TrimSpace(strings.SplitN(after, "\n", 2)[0]))
	if err != nil {
		kept = strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
	}
	for path, want := range map[string]struct {
		run    string
		events uint64
	}{kept: {"first", 10}, bundle: {"second", 20}} {
		s, err := traces.Inspect(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s.Manifest.Run != want.run || s.Counts["replay"] != want.events || s.Truncated {
			t.Errorf("%s: run %q, %d replays, truncated %v; want %s with %d", path, s.Manifest.Run, s.Counts["replay"], s.Truncated, want.run, want.events)
		}
	}
}

// Issue 27 D19: collect's summary shows a producer whose claimed pid
// differs from the kernel's.
func TestWriteCollectSummaryClaimDiffers(t *testing.T) {
	uid := int64(1000)
	var b strings.Builder
	writeCollectSummary(&b, CollectSummary{Conns: []hook.ConnStats{{ID: 3, Remote: "127.0.0.1:5555", PeerPID: 4242, PeerUID: &uid,
		ClaimDiffers: "claimed pid 7, the kernel says pid 4242 (12 events)"}}})
	wantContains(t, "summary", b.String(), "connection 3 (127.0.0.1:5555): claimed pid 7, the kernel says pid 4242 (12 events); kernel peer pid 4242 uid 1000")
}
