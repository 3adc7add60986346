package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
)

func TestSimServeFlags(t *testing.T) {
	got := mustParse(t, NewCmdSimServe, "--multi-stream-overlap=false", "--seed", "7", "--addr", "localhost:0")
	cfg, err := got.Engine.config(got.Seed)
	if err != nil || cfg.MultiStreamOverlap || cfg.Seed != 7 || got.Rounds != 4 || got.Model == "" || got.StepTime != server.EngineStepTime {
		t.Fatalf("options %+v cfg %+v err %v", got, cfg, err)
	}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--addr", "0.0.0.0:30000"}, false},
		{[]string{"--addr", "10.1.2.3:30000"}, false},
		{[]string{"--addr", "nonsense"}, false},
		{[]string{"--addr", "0.0.0.0:30000", "--allow-remote"}, true},
		{[]string{"--addr", "[::1]:0"}, true},
		{[]string{"--rounds", "0"}, false},
		{[]string{"--step-time", "-1ms"}, false},
		{[]string{"--step-time", "0"}, true},
	} {
		_, err := parseCmd(NewCmdSimServe, tc.args...)
		if tc.ok != (err == nil) || (!tc.ok && cmdutil.ExitCode(err) != cmdutil.ExitUsage) {
			t.Errorf("%v: err %v", tc.args, err)
		}
	}
	// sim serve hangs under the sim parent.
	root := NewCmdRoot(newTestCLI().F)
	if c, _, err := root.Find([]string{"sim", "serve"}); err != nil || c.Name() != "serve" {
		t.Fatalf("sim serve not registered: %v", err)
	}
}

// TestSimServeRun serves, answers a harness, and on cancellation reports the
// ground truth and closes a bundle holding one session event per session.
func TestSimServeRun(t *testing.T) {
	ios, _, out, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: time.Now}
	bundle := filepath.Join(t.TempDir(), "serve.kvtrace")
	addr, done := startSimServe(t, f, false, "--addr", "127.0.0.1:0", "--record", bundle, "--json", "--no-canary", "--no-graphdiff", "--no-checksum", "--step-time", "1ms")
	resp, err := http.Get("http://" + addr + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	res, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: "http://" + addr, Sessions: 3, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var s serveSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if s.Requests != res.Requests || s.Sessions != 3 || s.Steps == 0 || s.GraphReplays+s.EagerSteps == 0 || s.GraphReplays+s.EagerSteps > s.Steps ||
		s.StepTime != "1ms" || s.StepOverruns > s.Steps {
		t.Fatalf("summary %+v, harness sent %d", s, res.Requests)
	}
	rs, err := runStatsFromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Outcomes.Total() != 3 || rs.Config.Engine != "sim" || !strings.HasPrefix(rs.Config.URL, "http://127.0.0.1:") || rs.Config.StepTime != "1ms" {
		t.Fatalf("bundle %+v config %+v", rs.Outcomes, rs.Config)
	}
	// The server's session events are judged by the same classifier as the
	// harness, from the same replies: they agree.
	if rs.Outcomes != res.Outcomes {
		t.Fatalf("server bundle outcomes %+v, harness %+v", rs.Outcomes, res.Outcomes)
	}
}

// TestSimServeBusyPort: a busy address is an input error naming the address,
// and leaves neither a bundle nor a log file behind.
func TestSimServeBusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	bundle, logFile := filepath.Join(dir, "serve.kvtrace"), filepath.Join(dir, "serve.log")
	_, _, err = runCmd(NewCmdSimServe, "--addr", busy.Addr().String(), "--record", bundle, "--log-file", logFile)
	if err == nil || cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), busy.Addr().String()) {
		t.Fatalf("busy port: err %v (exit %d), want an input error naming %s", err, cmdutil.ExitCode(err), busy.Addr())
	}
	for _, p := range []string{bundle, logFile} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind (stat: %v)", p, err)
		}
	}
}

// TestSimServeDrainsOnStop: Ctrl-C while a request is in flight still
// answers it (the engine keeps stepping until the HTTP server has shut down).
func TestSimServeDrainsOnStop(t *testing.T) {
	ios, _, _, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: time.Now}
	addr, done := startSimServe(t, f, true, "--addr", "127.0.0.1:0", "--no-canary", "--no-graphdiff", "--no-checksum")
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"Task 1: tool rounds: 1"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The role delta is sent once the request is submitted to the engine.
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q: %v", line, err)
	}
	cancel()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("in-flight stream after stop: %v (read %q)", err, rest)
	}
	if !strings.Contains(string(rest), `"finish_reason":`) || !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Fatalf("in-flight stream not finished after stop:\n%s", rest)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// startSimServe runs `sim serve args…` in the background until it is ready
// and returns its address and the channel its exit arrives on. discardOut
// drops stdout (the tests that read the summary keep it).
func startSimServe(t *testing.T, f *cmdutil.Factory, discardOut bool, args ...string) (string, chan error) {
	t.Helper()
	ready := make(chan string, 1)
	cmd := NewCmdSimServe(f, func(o *SimServeOptions) error {
		o.Ready = func(addr string) { ready <- addr }
		return simServeRun(o)
	})
	cmd.SetArgs(args)
	cmd.SetErr(io.Discard)
	if discardOut {
		cmd.SetOut(io.Discard)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()
	select {
	case addr := <-ready:
		return addr, done
	case err := <-done:
		t.Fatalf("serve exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server never became ready")
	}
	return "", nil
}
