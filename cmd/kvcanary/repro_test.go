package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

func TestReproFlags(t *testing.T) {
	got, err := parseCmd(NewCmdRepro, "--url", "http://127.0.0.1:30000", "--sessions", "12", "--leak-marker", "X", "--leak-marker", "Y", "--stream")
	if err != nil {
		t.Fatal(err)
	}
	if got.Sessions != 12 || got.Rounds != 4 || got.Concurrency != 12 || got.Timeout != 120*time.Second || !got.Stream ||
		!reflect.DeepEqual(got.Markers, []string{"X", "Y"}) || got.Seed != 1 || got.ToolTime != repro.DefaultToolTime {
		t.Fatalf("options %+v", got)
	}
	for _, args := range [][]string{
		{},
		{"--url", "ftp://x"},
		{"--url", "http://h", "--sessions", "0"},
		{"--url", "http://h", "--timeout", "0s"},
		{"--url", "http://h", "extra"},
		{"--url", "http://h", "--max-tokens", "-5"},
		{"--url", "http://h", "--concurrency", "-1"},
	} {
		if _, err := parseCmd(NewCmdRepro, args...); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

// sglangFake answers like a model (tool calls for the stated tool rounds,
// then text; sessions whose task number is divisible by 5 leak DSML) and
// appends an SGLang decode line to logPath per request, with a retraction at
// the 10th request.
func sglangFake(t *testing.T, logPath string) http.Handler {
	var mu sync.Mutex
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"fake-model"}]}`)
			return
		}
		var req struct {
			Messages []struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		round, toolRounds, task := 0, 0, 0
		for _, m := range req.Messages {
			if m.Role == "assistant" {
				round++
			}
			if m.Role == "user" && m.Content != nil {
				fmt.Sscanf(*m.Content, "Task %d", &task)
				fmt.Sscanf((*m.Content)[strings.Index(*m.Content, "tool rounds:"):], "tool rounds: %d", &toolRounds)
			}
		}
		k := n.Add(1)
		if logPath != "" {
			mu.Lock()
			f, err := os.OpenFile(logPath, os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				fmt.Fprintf(f, "[2026-11-29 10:00:%02d TP0] Decode batch, #running-req: %d, #token: 1000, token usage: 0.%02d, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0, \n", k%60, k%40+1, k%90+5)
				if k == 10 {
					fmt.Fprintf(f, "[2026-11-29 10:00:%02d TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.7000 -> 1.0000\n", k%60)
				}
				f.Close()
			}
			mu.Unlock()
		}
		msg := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Oslo\"}"}}]}`
		finish := "tool_calls"
		switch {
		case task%5 == 0 && round == 1:
			msg, finish = `{"role":"assistant","content":"<｜DSML｜function_calls><｜DSML｜invoke name=\"get_weather"}`, "stop"
		case round >= toolRounds:
			msg, finish = `{"role":"assistant","content":"Done."}`, "stop"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":%s,"finish_reason":%q}]}`, k, msg, finish)
	})
}

func runRepro(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	c := newTestCLI()
	cmd := NewCmdRepro(c.F, nil)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as under the root command
	err := c.exec(cmd, args...)
	return c.Out.String(), c.ErrOut.String(), err
}

func TestReproRecordsForAB(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "sglang.log")
	if err := os.WriteFile(logPath, []byte("[2026-11-29 09:59:59 TP0] server started\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(sglangFake(t, logPath))
	defer hs.Close()
	a := filepath.Join(dir, "a.kvtrace")
	out, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "20", "--rounds", "3", "--concurrency", "5",
		"--record", a, "--server-log", logPath, "--json", "--tool-time", "0")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if l != "" && !strings.HasPrefix(l, "repro: the server did not report its settings") && !strings.HasPrefix(l, "repro: server log timestamps read in") {
			t.Errorf("stderr on a non-TTY beyond the settings and time-zone notes: %q", l)
		}
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, k := range []string{"sessions", "rounds", "outcomes", "corrupted_sessions", "corruption_rate", "wilson95", "wall_seconds", "requests", "finish_reasons", "sched", "model"} {
		if _, ok := got[k]; !ok {
			t.Errorf("--json lacks %q", k)
		}
	}
	var s struct {
		outcome.Summary
		Model string              `json:"model"`
		Sched sessions.SchedStats `json:"sched"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	var outcomeKeys []string
	var oc map[string]int
	json.Unmarshal(got["outcomes"], &oc)
	for k := range oc {
		outcomeKeys = append(outcomeKeys, k)
	}
	sort.Strings(outcomeKeys)
	if !reflect.DeepEqual(outcomeKeys, []string{"done", "error", "leak", "maxrounds", "no_tool", "timeout"}) {
		t.Errorf("outcome keys %v", outcomeKeys)
	}
	// Tasks 0, 5, 10, 15 leak in round 1 when they reach it (tool rounds ≥ 2).
	if s.Sessions != 20 || s.Outcomes.Leak == 0 || s.Outcomes.Error != 0 || s.Model != "fake-model" {
		t.Fatalf("summary %+v model %q", s.Summary, s.Model)
	}
	if s.Sched.Observations == 0 || s.Sched.PeakRunningReq == 0 || s.Sched.Retractions != 2 {
		t.Errorf("server log sched %+v", s.Sched)
	}
	rs, err := runStatsFromBundle(a)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Outcomes != s.Outcomes || rs.Config.Engine != "remote" || rs.Config.URL != hs.URL || rs.Config.Concurrency != 5 ||
		rs.Config.Model != "fake-model" || rs.Sched.Retractions != 2 {
		t.Fatalf("bundle stats %+v config %+v", rs.Outcomes, rs.Config)
	}
	// A second run at another concurrency and tool time: ab reads both and
	// names them.
	b := filepath.Join(dir, "b.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "20", "--rounds", "3", "--concurrency", "20", "--record", b,
		"--tool-time", "5ms-20ms"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	abOut, _, err := runAB(t, a, b, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep sessions.ABReport
	if err := json.Unmarshal([]byte(abOut), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.A.Sessions != 20 || rep.B.Sessions != 20 {
		t.Fatalf("ab arms %+v %+v", rep.A.Summary, rep.B.Summary)
	}
	// The tool time is recorded with the run as workload, like the
	// concurrency: both are confounds, and no engine flag differs.
	byName := map[string]sessions.Confound{}
	for _, c := range rep.Confounds {
		byName[c.Name] = c
	}
	if _, ok := byName["concurrency"]; !ok {
		t.Errorf("ab confounds %+v lack concurrency", rep.Confounds)
	}
	if c, ok := byName["tool_time"]; !ok || fmt.Sprint(c.A) != "0s" || fmt.Sprint(c.B) != "5ms-20ms" {
		t.Errorf("ab confounds %+v: want tool_time 0s vs 5ms-20ms", rep.Confounds)
	}
	if rep.FlagUnderTest != nil || len(rep.DifferingFlags) != 0 {
		t.Errorf("ab took %+v (differing %+v) for an engine flag; only the workload differs", rep.FlagUnderTest, rep.DifferingFlags)
	}
}

// TestReproToolTimeFlag: --tool-time takes MIN-MAX or one duration; a bad
// value is a usage error naming the flag and the value.
func TestReproToolTimeFlag(t *testing.T) {
	for _, tc := range []struct {
		val  string
		want repro.ToolTime
	}{
		{"0", repro.ToolTime{}},
		{"2s", repro.ToolTime{Min: 2 * time.Second, Max: 2 * time.Second}},
		{"250ms-1s", repro.ToolTime{Min: 250 * time.Millisecond, Max: time.Second}},
	} {
		if got, err := parseCmd(NewCmdRepro, "--url", "http://h", "--tool-time", tc.val); err != nil || got.ToolTime != tc.want {
			t.Errorf("--tool-time %s: err %v, options %+v", tc.val, err, got)
		}
	}
	for _, val := range []string{"3s-1s", "soon", "-2s", ""} {
		c := newTestCLI()
		err := c.exec(NewCmdRoot(c.F), "repro", "--url", "http://h", "--tool-time", val)
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(fmt.Sprint(err), "--tool-time") || !strings.Contains(fmt.Sprint(err), "tool time") {
			t.Errorf("--tool-time %q: err %v, want a usage error naming the flag", val, err)
		}
	}
}

// TestReproAllErrorsExits3: with --no-preflight, a run whose every session
// errors (an unreachable URL) reports no measurement and exits 3 — it must
// not read as CORRUPTION 100% with exit 0. The bundle still holds the
// sessions.
func TestReproAllErrorsExits3(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	bundle := filepath.Join(t.TempDir(), "dead.kvtrace")
	out, _, err := runRepro(t, "--url", url, "--sessions", "3", "--rounds", "2", "--model", "m", "--record", bundle, "--no-preflight")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), "every session ended in error or timeout") ||
		!strings.Contains(fmt.Sprint(err), "connection refused") {
		t.Fatalf("err %v (exit %d), want exit 3 naming the failure", err, cmdutil.ExitCode(err))
	}
	if strings.Contains(out, "CORRUPTION") || !strings.Contains(out, "NO MEASUREMENT: all 3 sessions ended in error or timeout") ||
		!strings.Contains(out, "transport") || !strings.Contains(out, "tool time 1.5s-6s") {
		t.Fatalf("output %q", out)
	}
	rs, err := runStatsFromBundle(bundle)
	if err != nil || rs.Outcomes.Error != 3 {
		t.Fatalf("bundle %+v %v", rs, err)
	}
	// --json says the same in "verdict".
	out, _, err = runRepro(t, "--url", url, "--sessions", "2", "--rounds", "1", "--model", "m", "--no-preflight", "--json")
	var got struct {
		Verdict string   `json:"verdict"`
		Notes   []string `json:"notes"`
	}
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || json.Unmarshal([]byte(out), &got) != nil || got.Verdict != sessions.VerdictServerFailed || len(got.Notes) != 1 {
		t.Fatalf("--json: err %v, %s", err, out)
	}
}

func TestProgressBar(t *testing.T) {
	var b strings.Builder
	now := time.Unix(0, 0)
	p := progressBar(&b, "repro", func() time.Time { now = now.Add(time.Second); return now })
	p(1, 4)
	p(4, 4)
	if !strings.Contains(b.String(), "repro [#######") || !strings.Contains(b.String(), "1/4 sessions") || !strings.HasSuffix(b.String(), "\r\033[K") {
		t.Fatalf("%q", b.String())
	}
}

// An interrupted run says so before its rate, and counts only what finished.
func TestReproTextInterrupted(t *testing.T) {
	var b strings.Builder
	res := &repro.HarnessResult{Aborted: 35}
	res.Summary = outcome.SummaryOf(outcome.Counts{Done: 4, Leak: 1}, 4, time.Second)
	if err := writeReproText(&b, reproJSON{HarnessResult: res, Interrupted: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "INTERRUPTED: 5 sessions finished before the stop, 35 were cut short and are not counted") ||
		!strings.Contains(b.String(), "CORRUPTION sessions: 1/5") {
		t.Fatalf("interrupted report:\n%s", b.String())
	}
}
