package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/spec/outcome"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

func TestReproFlags(t *testing.T) {
	got := mustParse(t, NewCmdRepro, "--url", "http://127.0.0.1:30000", "--sessions", "12", "--leak-marker", "X", "--leak-marker", "Y", "--stream")
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
		wantUsage(t, NewCmdRepro, args...)
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
	rep := abJSON(t, a, b)
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
// errors (a server that answers HTTP 500 to every request) reports no
// measurement and exits 3 — it must not read as CORRUPTION 100% with exit
// 0. The bundle still holds the sessions. (A URL that answers nothing is a
// lost server: TestReproServerLost, repro's TestHarnessServerLost.)
func TestReproAllErrorsExits3(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":{"message":"out of memory","type":"server_error"}}`)
	}))
	t.Cleanup(hs.Close)
	url := hs.URL
	bundle := filepath.Join(t.TempDir(), "dead.kvtrace")
	out, _, err := runRepro(t, "--url", url, "--sessions", "3", "--rounds", "2", "--model", "m", "--record", bundle, "--no-preflight")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), "every session ended in error or timeout") ||
		!strings.Contains(fmt.Sprint(err), "HTTP 500: out of memory") {
		t.Fatalf("err %v (exit %d), want exit 3 naming the failure", err, cmdutil.ExitCode(err))
	}
	// Said once: the headline, not again as a note (issue 23 had it three
	// times with the exit error).
	if strings.Contains(out, "CORRUPTION") || !strings.Contains(out, "NO MEASUREMENT: every session ended in error or timeout (error=3 timeout=0)") ||
		strings.Count(out, "ended in error or timeout") != 1 ||
		!strings.Contains(out, "HTTP 500") || !strings.Contains(out, "tool time 1.5s-6s") {
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

// chatServer is a loopback fake OpenAI server: GET /v1/models lists
// "fake-model"; every chat request is counted and answered with the message
// JSON and finish reason reply returns.
func chatServer(t *testing.T, reply func(r *http.Request, body []byte) (msg, finish string)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var chats atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"fake-model"}]}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		k := chats.Add(1)
		msg, finish := reply(r, body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":%s,"finish_reason":%q}]}`, k, msg, finish)
	}))
	t.Cleanup(hs.Close)
	return hs, &chats
}

const toolCallMsg = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]}`

// TestReproPreflightStops: each way a server cannot be measured stops in
// preflight, before any session and before the bundle is created, with exit 3
// and a hint naming the cause.
func TestReproPreflightStops(t *testing.T) {
	deadURL := "http://" + testenv.FreeAddr(t)
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":{"message":"invalid api key","type":"auth"}}`)
	}))
	defer auth.Close()
	leaky, leakyChats := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}</tool_call>"}`, "stop"
	})
	jsonText, _ := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}"}`, "stop"
	})
	prose, proseChats := chatServer(t, func(*http.Request, []byte) (string, string) {
		return `{"role":"assistant","content":"Paris is usually mild this time of year."}`, "stop"
	})
	vllmNoAuto := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}}`)
	}))
	defer vllmNoAuto.Close()
	for _, tc := range []struct {
		name, url string
		args      []string
		cause     string
		hint      []string
		chats     *atomic.Int64 // chat requests the server saw: the probes only
	}{
		{name: "unreachable", url: deadURL, cause: "unreachable", hint: []string{"connection refused", "--url"}},
		{name: "auth", url: auth.URL, cause: "auth", hint: []string{"HTTP 401", "invalid api key", "--api-key", "OPENAI_API_KEY"}},
		{name: "leaks markup", url: leaky.URL, cause: "no_tool_parser", hint: []string{"<tool_call>", "--tool-call-parser", "--enable-auto-tool-choice"}, chats: leakyChats},
		{name: "JSON in content", url: jsonText.URL, cause: "no_tool_parser", hint: []string{"JSON text in content", "--tool-call-parser"}},
		{name: "prose", url: prose.URL, cause: "ignores_tools", hint: []string{"answered in prose", "chat template", "--no-preflight"}, chats: proseChats},
		{name: "vllm without auto tool choice", url: vllmNoAuto.URL, cause: "no_tool_parser", hint: []string{"HTTP 400", "--enable-auto-tool-choice"}},
		{name: "model missing", url: prose.URL, args: []string{"--model", "other"}, cause: "model_missing", hint: []string{`"other"`, `"fake-model"`, "--model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := filepath.Join(t.TempDir(), "x.kvtrace")
			before := int64(0)
			if tc.chats != nil {
				before = tc.chats.Load()
			}
			args := append([]string{"--url", tc.url, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--record", bundle}, tc.args...)
			out, _, err := runRepro(t, args...)
			if cmdutil.ExitCode(err) != cmdutil.ExitInput {
				t.Fatalf("exit %d (err %v), want 3", cmdutil.ExitCode(err), err)
			}
			msg := fmt.Sprint(err)
			if !strings.Contains(msg, "preflight") || !strings.Contains(msg, ": "+tc.cause+": ") || !strings.Contains(msg, "hint:") {
				t.Errorf("error %q does not name preflight cause %s with a hint", msg, tc.cause)
			}
			for _, h := range tc.hint {
				if !strings.Contains(msg, h) {
					t.Errorf("error %q lacks %q", msg, h)
				}
			}
			if out != "" {
				t.Errorf("stdout %q: a failed preflight prints no report", out)
			}
			if _, err := os.Stat(bundle); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("bundle created before preflight passed: %v", err)
			}
			if tc.chats != nil {
				if n := tc.chats.Load() - before; n != int64(repro.PreflightProbes) {
					t.Errorf("%d chat requests, want the %d probes only", n, repro.PreflightProbes)
				}
			}
		})
	}
	// --json prints the failure as an object too.
	out, _, err := runRepro(t, "--url", leaky.URL, "--json")
	var got struct {
		Preflight struct {
			OK    bool                 `json:"ok"`
			Error repro.PreflightError `json:"error"`
		} `json:"preflight"`
	}
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || json.Unmarshal([]byte(out), &got) != nil || got.Preflight.OK ||
		got.Preflight.Error.Cause != repro.CauseNoToolParser || got.Preflight.Error.Hint == "" {
		t.Errorf("--json preflight failure: err %v, %s", err, out)
	}
	// --no-preflight measures anyway; the prose model's no_tool share asks
	// for a control run (exit 0: it is a measurement).
	out, _, err = runRepro(t, "--url", prose.URL, "--sessions", "4", "--rounds", "2", "--tool-time", "0", "--no-preflight")
	if err != nil || !strings.Contains(out, "CORRUPTION sessions: 4/4") || !strings.Contains(out, "note: no_tool in 4 of 4 sessions") ||
		!strings.Contains(out, "--disable-cuda-graph") || !strings.Contains(out, "kvcanary ab") {
		t.Errorf("--no-preflight on a prose model: err %v, output %q", err, out)
	}
}

// TestReproAPIKeyAndHeaders: the key and headers reach every request
// (models, probe, chat); neither value appears in stdout, stderr or the
// decompressed bundle, even when the server echoes them in an error.
func TestReproAPIKeyAndHeaders(t *testing.T) {
	const key, team = "sk-test-4f9a1c0d2e", "team-infra-77"
	var mu sync.Mutex
	seen := map[string]int{} // path → requests with both credentials
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Header.Get("Authorization") != "Bearer "+key || r.Header.Get("X-Team") != team {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":{"message":"bad credentials %s / %s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Team"))
			return
		}
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[{"id":"m"}]}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","choices":[{"index":0,"message":%s,"finish_reason":"tool_calls"}]}`, toolCallMsg)
	}))
	defer hs.Close()
	bundle := filepath.Join(t.TempDir(), "auth.kvtrace")
	out, errOut, err := runRepro(t, "--url", hs.URL, "--api-key", key, "--header", "X-Team: "+team, "--sessions", "3", "--rounds", "2",
		"--tool-time", "0", "--record", bundle, "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if seen["/v1/models"] != 1 || seen["/v1/chat/completions"] != repro.PreflightProbes+3*2 {
		t.Errorf("authenticated requests %v, want models 1 and chat %d (probes + 3 sessions × 2 rounds)", seen, repro.PreflightProbes+3*2)
	}
	text := bundleText(t, bundle)
	for _, secret := range []string{key, team} {
		if strings.Contains(out+errOut+text, secret) {
			t.Errorf("%q leaked into the output or the bundle", secret)
		}
	}
	if !strings.Contains(text, `"workload.headers":"X-Team"`) || !strings.Contains(text, `"workload.api_key":"set"`) {
		t.Errorf("bundle does not record the header name and that a key was set")
	}
	// OPENAI_API_KEY when the flag is absent; a refused key is named as
	// auth without printing it (the server echoes it in its error).
	t.Setenv("OPENAI_API_KEY", key)
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--header", "X-Team:"+team, "--sessions", "1", "--rounds", "1", "--tool-time", "0"); err != nil {
		t.Fatalf("OPENAI_API_KEY: %v: %s", err, errOut)
	}
	t.Setenv("OPENAI_API_KEY", "sk-wrong-key-31337")
	out, errOut, err = runRepro(t, "--url", hs.URL, "--header", "X-Team:"+team, "--sessions", "1")
	msg := fmt.Sprint(err)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(msg, "auth") || !strings.Contains(msg, "refused the credentials") {
		t.Errorf("wrong key: %v", err)
	}
	if strings.Contains(out+errOut+msg, "sk-wrong-key-31337") || strings.Contains(out+errOut+msg, team) {
		t.Errorf("a refused key or header value was printed: %q", msg)
	}
	// --api-key and an Authorization header conflict.
	if _, _, err := runRepro(t, "--url", hs.URL, "--header", "Authorization: Basic eA=="); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Errorf("Authorization header with OPENAI_API_KEY: %v, want a usage error", err)
	}
}

// TestReproSamplingRecorded: sampling settings go into every request and
// into the run configuration as workload extras; ab reads a difference in
// them as a workload confound, not as the flag under test.
func TestReproSamplingRecorded(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	hs, _ := chatServer(t, func(r *http.Request, body []byte) (string, string) {
		if r.Method == http.MethodPost { // not repro's GETs of the server's settings
			var m map[string]any
			json.Unmarshal(body, &m)
			mu.Lock()
			bodies = append(bodies, m)
			mu.Unlock()
		}
		return toolCallMsg, "tool_calls"
	})
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.kvtrace"), filepath.Join(dir, "b.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", a,
		"--temperature", "0.6", "--top-p", "0.95", "--sampling-seed", "7", "--max-tokens", "300"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if len(bodies) != repro.PreflightProbes+2 {
		t.Fatalf("%d requests", len(bodies))
	}
	for _, m := range bodies {
		if m["temperature"] != 0.6 || m["top_p"] != 0.95 || m["seed"] != 7.0 || m["max_tokens"] != 300.0 {
			t.Fatalf("request sampling %v %v %v %v", m["temperature"], m["top_p"], m["seed"], m["max_tokens"])
		}
	}
	rs, err := runStatsFromBundle(a)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"workload.temperature": "0.6", "workload.top_p": "0.95", "workload.sampling_seed": "7", "workload.max_tokens": "300"}
	for k, v := range want {
		if rs.Config.Extra[k] != v {
			t.Errorf("config extra %s = %q, want %q (extra %v)", k, rs.Config.Extra[k], v, rs.Config.Extra)
		}
	}
	// Unset: not sent.
	mu.Lock()
	bodies = nil
	mu.Unlock()
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", b, "--temperature", "0.6",
		"--top-p", "0.95", "--sampling-seed", "7", "--max-tokens", "300", "--temperature", "0"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if bodies[0]["temperature"] != 0.0 {
		t.Errorf("--temperature 0 not sent as 0: %v", bodies[0]["temperature"])
	}
	rep := abJSON(t, a, b)
	found := false
	for _, c := range rep.Confounds {
		found = found || (c.Name == "extra.workload.temperature" && c.A == "0.6" && c.B == "0")
	}
	if !found || rep.FlagUnderTest != nil || len(rep.DifferingFlags) != 0 {
		t.Errorf("ab: confounds %+v, flag under test %+v, differing %+v; want temperature as a workload confound only", rep.Confounds, rep.FlagUnderTest, rep.DifferingFlags)
	}
	for _, args := range [][]string{{"--temperature", "3"}, {"--top-p", "0"}, {"--header", "NoColon"}, {"--api-key", ""}} {
		if _, _, err := runRepro(t, append([]string{"--url", hs.URL}, args...)...); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestReproConversationsTwin replays a JSONL file of three sessions against
// the twin server: one session per line, named by the lines, classified
// with the usual outcome classes, every request the twin saw accounted for
// (the preflight probe plus the sessions' requests).
func TestReproConversationsTwin(t *testing.T) {
	srv, url := serveTwinServer(t, func(*sim.Config) {})
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.jsonl")
	lines := `{"id":"refund","messages":[{"role":"system","content":"You are a support agent."},{"role":"user","content":"Customer 4411 wants a refund for order 9. tool rounds: 2"}],"tool_rounds":2,"rounds":3}

{"id":"weather","model":"ignored","temperature":0.1,"messages":[{"role":"user","content":"Plan a picnic in Oslo this weekend. tool rounds: 1"}],"tool_rounds":1,"rounds":3}
{"messages":[{"role":"user","content":"Summarise the incident report for the outage. tool rounds: 2"}],"tool_rounds":2}
`
	if err := os.WriteFile(file, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "conv.kvtrace")
	out, errOut, err := runRepro(t, "--url", url, "--conversations", file, "--rounds", "3", "--tool-time", "0", "--record", bundle,
		"--run", "conv-test", "--json")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	var got struct {
		outcome.Summary
		Requests   int                   `json:"requests"`
		PerSession []repro.SessionResult `json:"per_session"`
		Run        string                `json:"run"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Sessions != 3 || got.Run != "conv-test" || got.Outcomes.Error+got.Outcomes.Timeout != 0 {
		t.Fatalf("summary %+v run %q: %s", got.Summary, got.Run, out)
	}
	ids := []string{}
	for _, s := range got.PerSession {
		ids = append(ids, s.ID)
		if s.Rounds == 0 || s.Outcome == "" {
			t.Errorf("session %+v", s)
		}
	}
	if strings.Join(ids, ",") != "refund,weather,c002" {
		t.Errorf("session ids %v", ids)
	}
	if n := len(srv.Records()); n != got.Requests+repro.PreflightProbes {
		t.Errorf("twin served %d requests, repro sent %d + %d probes", n, got.Requests, repro.PreflightProbes)
	}
	rs, err := runStatsFromBundle(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Outcomes != got.Outcomes || rs.Config.Extra["workload.conversations"] != file || rs.Config.Extra["workload.conversations_count"] != "3" ||
		len(rs.Config.Extra["workload.conversations_sha256"]) != 64 {
		t.Errorf("bundle outcomes %+v config extra %v", rs.Outcomes, rs.Config.Extra)
	}
	// --sessions cycles through the lines.
	out, errOut, err = runRepro(t, "--url", url, "--conversations", file, "--sessions", "5", "--tool-time", "0", "--json", "--no-preflight")
	if err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	json.Unmarshal([]byte(out), &got)
	if got.Sessions != 5 || got.PerSession[3].ID != "refund/1" {
		t.Errorf("cycled sessions %+v", got.PerSession)
	}
	// A bad line is an input error naming the file and line.
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(lines+`{"messages":[{"role":"user","content":"x"}],"tool_round":2}`+"\n"), 0o644)
	_, _, err = runRepro(t, "--url", url, "--conversations", bad)
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), bad+":5:") || !strings.Contains(fmt.Sprint(err), `"tool_round"`) {
		t.Errorf("bad line: %v", err)
	}
}

// TestReproRunID: --run names the bundle's run and every event in it.
func TestReproRunID(t *testing.T) {
	hs, _ := chatServer(t, func(*http.Request, []byte) (string, string) { return `{"role":"assistant","content":"ok"}`, "stop" })
	bundle := filepath.Join(t.TempDir(), "run.kvtrace")
	if _, errOut, err := runRepro(t, "--url", hs.URL, "--sessions", "2", "--rounds", "1", "--tool-time", "0", "--record", bundle,
		"--run", "nightly-42", "--no-preflight"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	b := readBundle(t, bundle)
	if b.Manifest.Run != "nightly-42" {
		t.Errorf("manifest run %q", b.Manifest.Run)
	}
	for _, ev := range b.Events {
		if ev.Run != "nightly-42" {
			t.Errorf("event %s has run %q", ev.Kind, ev.Run)
		}
	}
	if len(b.Events) != 4 { // run.start, 2 sessions, run.end
		t.Errorf("%d events", len(b.Events))
	}
}

// bundleText is a bundle's decompressed lines (manifest, events, footer).
func bundleText(t *testing.T, path string) string {
	t.Helper()
	br, err := traces.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	var b strings.Builder
	for {
		rec, err := br.NextRecord()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		b.Write(rec.Line)
		b.WriteByte('\n')
	}
}

// bundleRuns is a bundle's manifest run and the distinct runs of its events.
func bundleRuns(t *testing.T, path string) (string, map[string]int) {
	t.Helper()
	b := readBundle(t, path)
	runs := map[string]int{}
	for _, ev := range b.Events {
		runs[ev.Run]++
	}
	return b.Manifest.Run, runs
}

// TestSimRunAndServeRunID: the twin's recording commands take --run too.
func TestSimRunAndServeRunID(t *testing.T) {
	dir := t.TempDir()
	b := filepath.Join(dir, "sim.kvtrace")
	if _, errOut, err := runSim(t, false, "run", "--sessions", "2", "--rounds", "1", "--record", b, "--run", "twin-a"); err != nil {
		t.Fatalf("%v: %s", err, errOut)
	}
	if run, runs := bundleRuns(t, b); run != "twin-a" || len(runs) != 1 || runs["twin-a"] == 0 {
		t.Errorf("sim run bundle: manifest run %q, event runs %v", run, runs)
	}
	ios, _, _, _ := cmdutil.Test()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &cmdutil.Factory{IO: ios, Ctx: ctx, Now: func() time.Time { return time.Now() }}
	sb := filepath.Join(dir, "serve.kvtrace")
	addr, done := startSimServe(t, f, false, "--addr", "127.0.0.1:0", "--record", sb, "--run", "twin-b", "--no-canary", "--no-graphdiff", "--no-checksum", "--step-time", "1ms")
	if _, err := repro.RunHarness(context.Background(), repro.HarnessOptions{URL: "http://" + addr, Sessions: 2, Rounds: 1}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if run, runs := bundleRuns(t, sb); run != "twin-b" || len(runs) != 1 || runs["twin-b"] == 0 {
		t.Errorf("sim serve bundle: manifest run %q, event runs %v", run, runs)
	}
}

// secretReply is what leakFake answers on every round: tool-call markup in
// content, around a string a redacted bundle must not carry.
const secretReply = "Let me look that up: SECRET-REPLY-7731 <tool_call>{\"name\": \"get_weather\"}</tool_call>"

// leakFake answers every request with secretReply (a leak at round 1).
func leakFake() http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"fake-model"}]}`)
			return
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"req-%d","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`,
			n.Add(1), secretReply)
	})
}

// decompressed is a bundle's content: the manifest, every line and the
// footer, as the bundle reader decodes them (no external zstd needed, so the
// check never skips).
func decompressed(t *testing.T, path string) []byte {
	t.Helper()
	r, err := traces.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	m, _ := json.Marshal(r.Manifest())
	buf.Write(m)
	buf.WriteByte('\n')
	for {
		line, _, _, err := r.NextLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if f, ok := r.Footer(); ok {
		b, _ := json.Marshal(f)
		buf.Write(b)
	}
	return buf.Bytes()
}

func TestReproRedactLeavesNoText(t *testing.T) {
	srv := httptest.NewServer(leakFake())
	defer srv.Close()
	dir := t.TempDir()
	// The prompts repro sends: the system message and each session's task.
	prompts := []string{"You are a careful assistant"}
	for i := range 3 {
		prompts = append(prompts, repro.SessionTask(1, i, repro.ToolRoundsFor(1, i, 2)))
	}

	plain := filepath.Join(dir, "plain.kvtrace")
	if _, _, err := runRepro(t, "--url", srv.URL, "--no-preflight", "--sessions", "3", "--rounds", "2", "--tool-time", "0", "--record", plain); err != nil {
		t.Fatal(err)
	}
	if b := decompressed(t, plain); !bytes.Contains(b, []byte("SECRET-REPLY-7731")) || !bytes.Contains(b, []byte(`"excerpt"`)) {
		t.Fatalf("without --redact the bundle should keep the leaked reply as evidence:\n%s", b)
	}

	red := filepath.Join(dir, "red.kvtrace")
	out, _, err := runRepro(t, "--url", srv.URL, "--no-preflight", "--sessions", "3", "--rounds", "2", "--tool-time", "0", "--record", red, "--redact", "--json")
	if err != nil {
		t.Fatal(err)
	}
	b := decompressed(t, red)
	for _, s := range append(prompts, "SECRET-REPLY-7731", "Let me look that up", `get_weather\"`) {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("redacted bundle holds %q:\n%s", s, b)
		}
		if strings.Contains(out, s) {
			t.Errorf("redacted --json report holds %q", s)
		}
	}
	// The outcome classes, rounds and request ids still work.
	if n := bytes.Count(b, []byte(`"outcome":"leak"`)); n != 3 {
		t.Errorf("%d leak sessions in the redacted bundle, want 3:\n%s", n, b)
	}
	want := repro.Redacted(secretReply)
	if !bytes.Contains(b, []byte(`"excerpt":"`+want+`"`)) || !bytes.Contains(b, []byte(`"round":1`)) || !bytes.Contains(b, []byte(`"requests":["req-`)) {
		t.Errorf("redacted bundle lost the digest, the round or the request ids (want excerpt %q):\n%s", want, b)
	}
	if !strings.Contains(out, `"corrupted_sessions": 3`) && !strings.Contains(out, `"corrupted_sessions":3`) {
		t.Errorf("--json report: %s", out)
	}
}

func TestReproEmitStreamsSessions(t *testing.T) {
	srv := httptest.NewServer(leakFake())
	defer srv.Close()
	addr := "unix://" + filepath.Join(t.TempDir(), "c.sock")
	c, err := hook.Listen(addr, hook.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var got []hook.Event
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		served <- c.Serve(ctx, hook.PublishFunc(func(ev hook.Event) {
			mu.Lock()
			got = append(got, ev)
			mu.Unlock()
			if ev.Kind == hook.KindRunEnd {
				close(ended)
			}
		}))
	}()
	_, errOut, err := runRepro(t, "--url", srv.URL, "--no-preflight", "--sessions", "2", "--rounds", "2", "--tool-time", "0", "--emit", addr, "--redact")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "repro: emit: ") || !strings.Contains(errOut, ", 0 dropped") {
		t.Errorf("stderr does not account for the stream: %q", errOut)
	}
	// The emitter flushed before repro returned; run.end is the last event.
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector never saw run.end")
	}
	cancel()
	<-served
	mu.Lock()
	defer mu.Unlock()
	sessions := 0
	for _, ev := range got {
		if s, ok := ev.Body.(*hook.Session); ok {
			sessions++
			if s.Outcome != hook.OutcomeLeak || s.Round != 1 || !strings.HasPrefix(s.Excerpt, "redacted: ") || ev.Run != "repro-seed1" {
				t.Errorf("streamed session %+v (run %q)", s, ev.Run)
			}
		}
	}
	if sessions != 2 {
		t.Errorf("%d session events streamed, want 2", sessions)
	}
	if _, _, err := runRepro(t, "--url", srv.URL, "--emit", "ftp://x"); err == nil || !strings.Contains(err.Error(), "--emit") {
		t.Errorf("a malformed --emit address: %v, want a usage error naming --emit", err)
	}
}

func TestReproWatch(t *testing.T) {
	srv := httptest.NewServer(leakFake())
	defer srv.Close()
	if err := wantUsage(t, NewCmdRepro, "--url", srv.URL, "--no-preflight", "--watch"); !strings.Contains(fmt.Sprint(err), "not a terminal") {
		t.Fatalf("--watch without a terminal: %v", err)
	}

	c := newTestCLI()
	c.IO.SetTTY(true, false)
	var seen []hook.Event
	var doneErr error
	cmd := NewCmdRepro(c.F, func(o *ReproOptions) error {
		// The dashboard stand-in reads the live view to its end, as the
		// dashboard would, then takes the source's end.
		o.runTUI = func(ctx context.Context, to tui.Options) (tui.Stats, error) {
			if to.Sub == nil || to.Done == nil || to.SourceStatus == nil || to.Title != "kvcanary repro" {
				t.Errorf("dashboard options %+v", to)
			}
			for {
				ev, ok := to.Sub.Recv()
				if !ok {
					break
				}
				seen = append(seen, ev)
			}
			doneErr = <-to.Done
			if st := to.SourceStatus(); st != "3/3 sessions finished" {
				t.Errorf("source status %q", st)
			}
			return tui.Stats{Events: uint64(len(seen))}, nil
		}
		return reproRun(o)
	})
	if err := c.exec(cmd, "--url", srv.URL, "--no-preflight", "--sessions", "3", "--rounds", "2", "--tool-time", "0", "--watch", "--redact"); err != nil || doneErr != nil {
		t.Fatalf("repro --watch: %v (source end %v); stderr %s", err, doneErr, c.ErrOut)
	}
	sessions := 0
	for _, ev := range seen {
		if s, ok := ev.Body.(*hook.Session); ok {
			sessions++
			if s.Outcome != hook.OutcomeLeak || !strings.HasPrefix(s.Excerpt, "redacted: ") {
				t.Errorf("the view got %+v", s)
			}
		}
	}
	if sessions != 3 || seen[0].Kind != hook.KindRunStart || seen[len(seen)-1].Kind != hook.KindRunEnd {
		t.Errorf("the view saw %d sessions in %d events", sessions, len(seen))
	}
	if !strings.Contains(c.Out.String(), "leak=3") || !strings.Contains(c.ErrOut.String(), "repro: watch: ") {
		t.Errorf("report after the dashboard: stdout %q stderr %q", c.Out, c.ErrOut)
	}
}

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
	cfg := servertest.Config()
	mut(&cfg)
	tw := servertest.Start(t, server.Options{Config: cfg})
	return tw.Server, tw.URL
}

func manifestConfig(t *testing.T, path string) (hook.RunConfig, *hook.RunStart) {
	t.Helper()
	b := readBundle(t, path)
	var rs *hook.RunStart
	for _, ev := range b.Events {
		if s, ok := ev.Body.(*hook.RunStart); ok {
			rs = s
		}
	}
	return b.Manifest.Config, rs
}

// Against the twin standing in for a real server: two runs whose servers
// report different settings are attributed by ab without a single label.
func TestReproServerSettingsAB(t *testing.T) {
	// Four twin servers in process: 2 one-round sessions each under -race
	// (4 × 2 took minutes there); the settings are the point, not the load.
	sessions, rounds := 4, 2
	if raceEnabled {
		sessions, rounds = 2, 1
	}
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
				_, errOut, err := runRepro(t, "--url", url, "--sessions", fmt.Sprint(sessions), "--rounds", fmt.Sprint(rounds), "--tool-time", "0", "--record", p)
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
				rs.Config.ServerArgs["cuda_graph_max_bs"] == "" || rs.Config.Sessions != sessions {
				t.Fatalf("run.start config %+v", rs)
			}
			if cfg.CUDAGraph == nil || *cfg.CUDAGraph != *rs.Config.CUDAGraph || cfg.CUDAGraphMaxBS != rs.Config.CUDAGraphMaxBS {
				t.Errorf("manifest config %+v differs from run.start's %+v", cfg, rs.Config)
			}
			rep := abJSON(t, paths[0], paths[1])
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
	wantContains(t, "ab text", text, "cuda_graph is true in run A (reported by the server) but unknown in run B: not compared",
		"multi_stream_overlap is false in run A (labelled) but unknown in run B")
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
	for _, ev := range readBundle(t, path).Events {
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

// TestReproServerLost: the twin server dies after it has answered some chat
// requests (its listener closes and every request after is cut). repro
// stops there, says SERVER LOST and how many sessions it counted and cut,
// counts no error of the dead server as corruption, records only the
// counted sessions, and exits 3; --json carries server_lost and aborted.
// (Before, the killed server's cut sessions were error outcomes: a run read
// 31/40 = 78% corrupted and exited 0.)
func TestReproServerLost(t *testing.T) {
	// The twin answers 16 chat requests of 12 sessions; under -race 8 of 6
	// (the twin's arithmetic in process took minutes there): the server is
	// lost mid-run at either size.
	answered, nSessions := int64(16), 12
	if raceEnabled {
		answered, nSessions = 8, 6
	}
	for _, asJSON := range []bool{false, true} {
		tw := servertest.Start(t, server.Options{Config: servertest.Config()})
		var chats atomic.Int64
		var dead atomic.Bool
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/chat/completions") && chats.Add(1) > answered || dead.Load() {
				dead.Store(true)
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			tw.Server.Handler().ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		bundle := filepath.Join(t.TempDir(), "lost.kvtrace")
		args := []string{"--url", hs.URL, "--sessions", fmt.Sprint(nSessions), "--concurrency", "4", "--rounds", "3", "--tool-time", "0", "--record", bundle}
		if asJSON {
			args = append(args, "--json")
		}
		out, errOut, err := runRepro(t, args...)
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !errors.Is(err, repro.ErrServerLost) {
			t.Fatalf("json=%v: err %v (code %d), want ErrServerLost with exit 3\n%s", asJSON, err, cmdutil.ExitCode(err), errOut)
		}
		var got struct {
			outcome.Summary
			Aborted     int    `json:"aborted"`
			ServerLost  string `json:"server_lost"`
			Interrupted bool   `json:"interrupted"`
			Verdict     string `json:"verdict"`
		}
		if asJSON {
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.ServerLost == "" || got.Aborted == 0 || got.Outcomes.Error != 0 || got.Interrupted || got.Sessions+got.Aborted != nSessions ||
				got.Verdict != sessions.VerdictServerLost {
				t.Errorf("json: %s", out)
			}
		} else {
			wantContains(t, "report", out, "SERVER LOST: the server stopped answering: session ", "were cut short by it or never started and are not counted")
		}
		sessions := 0
		for _, ev := range readBundle(t, bundle).Events {
			if s, ok := ev.Body.(*hook.Session); ok {
				sessions++
				if s.Outcome == hook.OutcomeError {
					t.Errorf("json=%v: the bundle records a dead server's cut session as an outcome: %+v", asJSON, s)
				}
			}
		}
		if asJSON && sessions != got.Sessions {
			t.Errorf("bundle has %d session events, the report counts %d", sessions, got.Sessions)
		}
	}
}

// TestReproServerLogMustBeARegularFile: a FIFO as --server-log blocked the
// open until a writer came, and neither Ctrl-C nor SIGTERM stopped it; a
// directory failed mid-run. Both are refused before any request, naming
// the path.
func TestReproServerLogMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "server.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, p := range []string{fifo, dir} {
		_, _, err := runRepro(t, "--url", "http://"+testenv.FreeAddr(t), "--server-log", p)
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(fmt.Sprint(err), "is not a regular file") || !strings.Contains(fmt.Sprint(err), p) {
			t.Errorf("%s: err %v (exit %d), want an input error naming it", p, err, cmdutil.ExitCode(err))
		}
	}
}
