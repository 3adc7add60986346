package bisect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/logscan"
	"github.com/kvcanary/kvcanary/sessions"
	"github.com/kvcanary/kvcanary/traces"
)

// Server runs segments against an HTTP server: one launched from the
// plan's command template (engine "command") or one the user restarts by
// hand (engine "manual", with Confirm).
type Server struct {
	Spec ServerSpec
	// Harness is the workload every segment runs (URL, Sessions, Seed,
	// Publisher, OnSession and Run are set per segment).
	Harness repro.HarnessOptions
	Self    string // this kvcanary binary, for {self}
	// Confirm, for the manual engine, tells the user the flags to restart
	// the server with and waits for them to say it runs.
	Confirm func(ctx context.Context, arm string, flags []string, url string) error
	Log     func(format string, args ...any)
	// Location of the server log's timestamps (nil: local time).
	Location *time.Location
}

// tailBytes of a server's output are kept for error messages.
const tailBytes = 4 << 10

// Run implements Engine.
func (e *Server) Run(ctx context.Context, seg Segment, stats *sessions.RunStats, observe func(int, string, string) bool) (err error) {
	port, err := freePort()
	if err != nil {
		return err
	}
	expand := func(s string) string {
		return strings.NewReplacer("{port}", strconv.Itoa(port), "{flags}", ShellQuote(seg.Flags), "{self}", ShellQuote([]string{e.Self}), "{arm}", seg.Arm).Replace(s)
	}
	url, health := expand(e.Spec.URL), expand(e.Spec.Health)
	out := &ringBuffer{max: tailBytes}
	var exited chan error
	switch e.Spec.Engine {
	case EngineManual:
		if err := e.Confirm(ctx, seg.Arm, seg.Flags, url); err != nil {
			return err
		}
	default:
		var stopServer func() error
		stopServer, exited, err = e.start(ctx, expand(e.Spec.Command), seg, out)
		if err != nil {
			return err
		}
		defer func() {
			if serr := stopServer(); serr != nil && err == nil {
				err = serr
			}
		}()
	}
	if err := waitHealthy(ctx, health, e.Spec.startup, exited); err != nil {
		return withTail(err, out)
	}
	logPath := expand(e.Spec.Log)
	if logPath == "" {
		logPath = seg.Log
	}
	return e.harness(ctx, seg, url, logPath, stats, observe, exited, out)
}

// start launches the server command in its own process group, its output
// in seg.Log and the ring buffer. stop sends SIGTERM to the group, then
// SIGKILL after the grace period.
func (e *Server) start(ctx context.Context, cmdline string, seg Segment, out *ringBuffer) (stop func() error, exited chan error, err error) {
	var sink io.Writer = out
	var logFile *os.File
	if seg.Log != "" {
		if logFile, err = os.Create(seg.Log); err != nil {
			return nil, nil, fmt.Errorf("server log: %w", err)
		}
		sink = io.MultiWriter(logFile, out)
	}
	cmd := exec.Command("/bin/sh", "-c", cmdline)
	cmd.Env = os.Environ()
	for k, v := range e.Spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = sink, sink
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, nil, fmt.Errorf("start server %q: %w", cmdline, err)
	}
	e.logf("bisect: %s: started %s (pid %d)", seg.Arm, cmdline, cmd.Process.Pid)
	exited = make(chan error, 1)
	waited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(waited)
		exited <- waitErr
	}()
	pgid := cmd.Process.Pid
	stop = func() error {
		defer func() {
			if logFile != nil {
				logFile.Close()
			}
		}()
		select {
		case <-waited:
			return nil
		default:
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(e.Spec.grace):
			e.logf("bisect: %s: the server did not stop within %s of SIGTERM; SIGKILL", seg.Arm, e.Spec.grace)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-waited
		}
		return nil
	}
	return stop, exited, nil
}

// harness runs the segment's waves against the server at url; a server
// that exits while they run fails the segment. The server log (its output,
// or the plan's log file) is scanned for scheduler lines throughout.
func (e *Server) harness(ctx context.Context, seg Segment, url, logPath string, stats *sessions.RunStats, observe func(int, string, string) bool,
	exited chan error, out *ringBuffer) error {
	ho := e.Harness
	ho.URL, ho.Sessions = url, e.Harness.Concurrency
	client := repro.NewHarnessClient(ho.Concurrency)
	ho.Client = client
	defer client.CloseIdleConnections()

	rc := hook.RunConfig{Engine: "remote", URL: url, Model: ho.Model, Sessions: ho.Sessions, Rounds: ho.Rounds,
		Concurrency: ho.Concurrency, Seed: seg.Seed, ToolTime: ho.ToolTime.String(), Extra: ho.WorkloadExtra()}
	if info, err := repro.FetchServerInfo(ctx, client, url, 5*time.Second); err == nil {
		var settings hook.RunConfig
		repro.ApplyServerInfo(&settings, info)
		repro.MergeSettings(&rc, settings)
	}
	if rc.Provenance == nil {
		rc.Provenance = map[string]string{}
	}
	if !stats.HaveManifest {
		stats.SetManifest(ho.Tool, time.Now(), ho.Host, rc)
	}
	// One publisher for the segment: the harness (one goroutine at a time)
	// and the log tail publish concurrently; the current wave's pipeline
	// records both in its bundle.
	var mu sync.Mutex
	var cur *pipeline.Pipeline
	pub := hook.PublishFunc(func(ev hook.Event) {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil {
			cur.Publish(ev)
		}
		if ev.Kind != hook.KindRunStart && ev.Kind != hook.KindRunEnd {
			stats.Observe(ev)
		}
	})
	setCur := func(p *pipeline.Pipeline) {
		mu.Lock()
		defer mu.Unlock()
		cur = p
	}
	ho.Publisher = pub

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if exited != nil {
		go func() {
			select {
			case err := <-exited:
				cancel(fmt.Errorf("the server exited during the sessions (%v)", exitText(err)))
			case <-runCtx.Done():
			}
		}()
	}
	tailDone := make(chan error, 1)
	tailCtx, stopTail := context.WithCancel(context.Background())
	if logPath != "" {
		tail := logscan.NewTail(logPath, pub, logscan.TailOptions{Src: hook.Source{Proc: "server-log"}, Run: fmt.Sprintf("bisect-%s-%d", seg.Arm, seg.Index),
			FromStart: true, Parse: logscan.Options{Location: e.Location}})
		go func() { tailDone <- tail.Run(tailCtx) }()
	} else {
		tailDone <- nil
	}
	defer func() {
		stopTail()
		if err := <-tailDone; err != nil {
			e.logf("bisect: %s: server log: %v", seg.Arm, err)
		}
	}()
	if _, err := repro.Preflight(runCtx, ho); err != nil {
		return withTail(fmt.Errorf("preflight: %w", err), out)
	}
	stopped := false
	for w := range maxWaves(seg.Sessions, ho.Concurrency) {
		wave := ho
		wave.Seed = seg.WaveSeed(w)
		wave.Run = fmt.Sprintf("bisect-%s-%d-w%d", seg.Arm, seg.Index, w)
		wave.OnSession = func(i int, sr repro.SessionResult) {
			if stopped || runCtx.Err() != nil {
				return // the server died or we stopped: what finishes now is not evidence
			}
			if observe(w*ho.Concurrency+i, fmt.Sprintf("w%d/%s", w, sr.ID), sr.Outcome) {
				stopped = true
				cancel(errStopped)
			}
		}
		harness := pipeline.SourceFunc(func(ctx context.Context, _ hook.Publisher) error {
			_, err := repro.RunHarness(ctx, wave) // publishes to pub, which feeds cur
			return err
		})
		var runErr error
		if b := seg.WaveBundle(w); b != "" {
			p, err := pipeline.New(pipeline.Options{Record: b,
				Manifest: traces.Manifest{Tool: ho.Tool, Host: ho.Host, Config: rc, Run: wave.Run, Command: "bisect"}})
			if err != nil {
				return err // traces says "create bundle: …"
			}
			setCur(p)
			res := p.Run(runCtx, harness)
			setCur(nil)
			runErr = res.Err()
		} else {
			runErr = harness.Run(runCtx, nil)
		}
		cause := context.Cause(runCtx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(cause, errStopped):
			return nil
		case cause != nil:
			return withTail(cause, out)
		case runErr != nil:
			return runErr
		}
	}
	return errWavesExhausted(seg.Sessions)
}

var errStopped = errors.New("the bisect has what it needs")

func (e *Server) logf(format string, args ...any) {
	if e.Log != nil {
		e.Log(format, args...)
	}
}

// waitHealthy polls url until it answers 200, the server exits, or the
// timeout passes.
func waitHealthy(ctx context.Context, url string, timeout time.Duration, exited chan error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	c := &http.Client{Timeout: 5 * time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return fmt.Errorf("the server exited before it was healthy (%s)", exitText(err))
		case <-deadline.C:
			return fmt.Errorf("the server was not healthy at %s after %s (last: %s)", url, timeout, last)
		case <-tick.C:
		}
	}
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

func withTail(err error, out *ringBuffer) error {
	t := strings.TrimSpace(out.String())
	if t == "" {
		return err
	}
	return fmt.Errorf("%w; its output ends:\n%s", err, t)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ringBuffer keeps the last max bytes written to it.
type ringBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (r *ringBuffer) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.b = append(r.b, p...)
	if over := len(r.b) - r.max; over > 0 {
		r.b = append(r.b[:0], r.b[over:]...)
	}
	return len(p), nil
}

func (r *ringBuffer) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.b
	if i := bytes.IndexByte(b, '\n'); i >= 0 && len(b) == r.max {
		b = b[i+1:] // start at a whole line
	}
	return string(b)
}
