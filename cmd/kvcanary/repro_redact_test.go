package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
	"github.com/kvcanary/kvcanary/tui"
)

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
	if ran, err := parseCmd(NewCmdRepro, "--url", srv.URL, "--no-preflight", "--watch"); ran != nil || cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "not a terminal") {
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
