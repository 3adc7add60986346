package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// A flaky server (one chat request in three answered HTTP 500) is not a
// corrupting one: the error sessions still count in the rate (its definition
// does not change, so ab and the statistics keep their meaning), and the
// line beside the headline says they were the server failing loudly, with
// the silent rate alone. The requests line counts what was sent, failed
// ones included.
func TestReproSaysServerErrorsBesideTheHeadline(t *testing.T) {
	var chats atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"object":"list","data":[{"id":"fake-model"}]}`)
			return
		}
		io.Copy(io.Discard, r.Body)
		k := chats.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if k%3 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"internal error","type":"server_error"}}`)
			return
		}
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","choices":[{"index":0,"message":%s,"finish_reason":"tool_calls"}]}`, k, toolCallMsg)
	}))
	t.Cleanup(hs.Close)
	args := []string{"--url", hs.URL, "--sessions", "6", "--concurrency", "1", "--rounds", "1", "--model", "fake-model", "--no-preflight"}
	out, _, err := runRepro(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "CORRUPTION sessions: 2/6 = 33% (leak=0 no_tool=0 error=2") {
		t.Fatalf("headline %q: the rate keeps counting error sessions", lines[0])
	}
	if want := "SERVER ERRORS: 2 of the 2 error sessions ended in a server failure (HTTP 5xx 2), loud rather than silent; silent corruption (leak, no_tool) alone: 0/6 = 0%"; lines[1] != want {
		t.Fatalf("beside the headline:\n%q\nwant\n%q\n%s", lines[1], want, out)
	}
	wantContains(t, "stdout", out, "requests: 6 (4 answered, 2 failed: HTTP 5xx 2) to ")

	chats.Store(0)
	out, _, err = runRepro(t, append(args, "--json")...)
	var got struct {
		ServerErrors   int            `json:"server_error_sessions"`
		Requests       int            `json:"requests"`
		FailedRequests map[string]int `json:"failed_requests"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.ServerErrors != 2 || got.Requests != 6 || got.FailedRequests[repro.FailureHTTP5xx] != 2 {
		t.Fatalf("--json: %v %+v\n%s", err, got, out)
	}

	// Nothing answered: no empty "finish reasons: ;", no "requests: 0".
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway) // and GET /v1/models too: the server is lost
	}))
	t.Cleanup(dead.Close)
	out, _, err = runRepro(t, "--url", dead.URL, "--sessions", "2", "--concurrency", "1", "--rounds", "1", "--model", "m", "--no-preflight")
	if cmdutil.ExitCode(err) != cmdutil.ExitInput {
		t.Fatalf("every session failed: exit %d, want 3", cmdutil.ExitCode(err))
	}
	wantContains(t, "stdout", out, "SERVER LOST", "requests: 1 (0 answered, 1 failed: HTTP 5xx 1) to ", "finish reasons: none (no request was answered)")
}

// sim serve counts the sessions repro counts: repro's preflight probes are
// marked, and the twin leaves them out of its sessions (it counted them:
// 24 sessions against repro's 20).
func TestSimServeLeavesReproProbesOut(t *testing.T) {
	srv, url := serveTwinServer(t, func(c *sim.Config) {})
	out, _, err := runRepro(t, "--url", url, "--sessions", "3", "--rounds", "1", "--tool-time", "0s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(out, "the probe asked for") {
		t.Errorf("the twin called a tool the probe did not offer:\n%s", out)
	}
	if n := len(srv.Sessions()); n != 3 {
		t.Fatalf("the twin counted %d sessions, repro ran 3", n)
	}
	ios, _, sout, _ := cmdutil.Test()
	if err := writeServeSummary(&SimServeOptions{IO: ios, JSON: &cmdutil.JSONFlags{}}, srv); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "sim serve's summary", sout.String(), fmt.Sprintf(" in 3 sessions (and %d preflight probes, in none);", repro.PreflightProbes))
}
