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
	"sync/atomic"
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

// tailBytes of a server's output are quoted in error messages.
const tailBytes = 4 << 10

// healthEvery is how often a running server's health is polled while its
// sessions run; healthMisses failed polls in a row fail the segment (a
// server that stopped answering, or a manual server that went away).
const (
	healthEvery  = 2 * time.Second
	healthMisses = 3
)

// Run implements Engine.
func (e *Server) Run(ctx context.Context, seg Segment, stats *sessions.RunStats, observe func(int, string, string) bool) (err error) {
	port := 0
	if e.Spec.Engine != EngineManual {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	expand := func(s string) string {
		return strings.NewReplacer("{port}", strconv.Itoa(port), "{flags}", ShellQuote(seg.Flags), "{self}", ShellQuote([]string{e.Self}), "{arm}", seg.Arm).Replace(s)
	}
	url, health := expand(e.Spec.URL), expand(e.Spec.Health)
	// The server log to scan for scheduler lines: the plan's (read from
	// where it ends now: earlier segments' lines are theirs), else the
	// command's captured output (a new file per segment).
	logPath, fromStart := expand(e.Spec.Log), false
	if logPath == "" {
		logPath, fromStart = seg.Log, true
	}
	tail := e.startTail(logPath, fromStart, seg)
	defer tail.stop()
	var srv *process
	switch e.Spec.Engine {
	case EngineManual:
		if err := e.Confirm(ctx, seg.Arm, seg.Flags, url); err != nil {
			return err
		}
	default:
		if srv, err = e.start(expand(e.Spec.Command), seg); err != nil {
			return err
		}
		defer func() {
			if serr := srv.stop(e.Spec.grace, e.logf, seg.Arm); serr != nil && err == nil {
				err = serr
			}
		}()
	}
	if err := waitHealthy(ctx, health, e.Spec.startup, srv.exitedChan()); err != nil {
		return srv.withTail(err)
	}
	return e.harness(ctx, seg, url, health, stats, observe, srv, tail)
}

// process is a launched server: its own process group, its output in a
// file (so its exit is seen when it exits, whatever its children hold
// open).
type process struct {
	cmd    *exec.Cmd
	log    string // the output file
	temp   bool   // log is ours to remove
	exited chan error
	waited chan struct{}
}

// start launches the server command in its own process group, its output
// in seg.Log (a temporary file without one).
func (e *Server) start(cmdline string, seg Segment) (*process, error) {
	p := &process{log: seg.Log, exited: make(chan error, 1), waited: make(chan struct{})}
	var f *os.File
	var err error
	if p.log != "" {
		f, err = os.Create(p.log)
	} else {
		f, err = os.CreateTemp("", "kvcanary-bisect-*.log")
		p.temp = err == nil
	}
	if err != nil {
		return nil, fmt.Errorf("server log: %w", err)
	}
	p.log = f.Name()
	defer f.Close() // the child has its own descriptor
	cmd := exec.Command("/bin/sh", "-c", cmdline)
	cmd.Env = os.Environ()
	for k, v := range e.Spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.cleanup()
		return nil, fmt.Errorf("start server %q: %w", cmdline, err)
	}
	p.cmd = cmd
	e.logf("bisect: %s: started %s (pid %d)", seg.Arm, cmdline, cmd.Process.Pid)
	go func() {
		err := cmd.Wait()
		close(p.waited)
		p.exited <- err
	}()
	return p, nil
}

// exitedChan is nil for no process (a manual server).
func (p *process) exitedChan() chan error {
	if p == nil {
		return nil
	}
	return p.exited
}

// stop ends the whole process group: SIGTERM, then SIGKILL to whatever is
// left after grace (a server's workers outlive it otherwise, holding the
// GPUs the next arm's server needs).
func (p *process) stop(grace time.Duration, logf func(string, ...any), arm string) error {
	defer p.cleanup()
	pgid := p.cmd.Process.Pid
	alive := func() bool { return syscall.Kill(-pgid, 0) == nil }
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive() {
		logf("bisect: %s: the server's processes did not stop within %s of SIGTERM; SIGKILL", arm, grace)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for end := time.Now().Add(5 * time.Second); alive() && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
	}
	<-p.waited
	if alive() {
		return fmt.Errorf("the server's process group %d survived SIGKILL", pgid)
	}
	return nil
}

func (p *process) cleanup() {
	if p.temp {
		os.Remove(p.log)
	}
}

// withTail adds the end of the server's output to err.
func (p *process) withTail(err error) error {
	if p == nil {
		return err
	}
	f, ferr := os.Open(p.log)
	if ferr != nil {
		return err
	}
	defer f.Close()
	var b []byte
	if fi, serr := f.Stat(); serr == nil {
		off := max(fi.Size()-tailBytes, 0)
		b = make([]byte, fi.Size()-off)
		n, _ := f.ReadAt(b, off)
		b = b[:n]
		if off > 0 {
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				b = b[i+1:] // start at a whole line
			}
		}
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return err
	}
	return fmt.Errorf("%w; its output ends:\n%s", err, t)
}

// logTail scans a server log for scheduler lines during a segment; its
// events go where the segment's publisher is set.
type logTail struct {
	mu    sync.Mutex
	pub   hook.Publisher
	done  chan error
	stopf context.CancelFunc
}

func (t *logTail) Publish(ev hook.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pub != nil {
		t.pub.Publish(ev)
	}
}

func (t *logTail) setPublisher(p hook.Publisher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pub = p
}

// stop reads what is left of the log and ends the tail.
func (t *logTail) stop() {
	if t.stopf == nil {
		return
	}
	t.stopf()
	<-t.done
	t.stopf = nil
}

func (e *Server) startTail(path string, fromStart bool, seg Segment) *logTail {
	t := &logTail{}
	if path == "" {
		return t
	}
	if fromStart {
		// The command's own output file: created by start, after this.
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			f.Close()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	tl := logscan.NewTail(path, t, logscan.TailOptions{Src: hook.Source{Proc: "server-log"}, Run: fmt.Sprintf("bisect-%s-%d", seg.Arm, seg.Index),
		FromStart: fromStart, Parse: logscan.Options{Location: e.Location}})
	t.done, t.stopf = make(chan error, 1), cancel
	go func() {
		err := tl.Run(ctx)
		if err != nil {
			e.logf("bisect: %s: server log: %v", seg.Arm, err)
		}
		t.done <- err
	}()
	<-tl.Ready()
	return t
}

// harness runs the segment's waves against the server at url. A server
// that exits, or stops answering health, fails the segment; sessions that
// end after that are not evidence.
func (e *Server) harness(ctx context.Context, seg Segment, url, health string, stats *sessions.RunStats, observe func(int, string, string) bool,
	srv *process, tail *logTail) error {
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
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var stopped atomic.Bool // we stopped the wave: what ends after is our abort, not evidence
	// One publisher for the segment: the harness (one goroutine at a time)
	// and the log tail publish concurrently; the current wave's pipeline
	// records both in its bundle.
	var mu sync.Mutex
	var cur *pipeline.Pipeline
	pub := hook.PublishFunc(func(ev hook.Event) {
		if ev.Kind == hook.KindSession && (stopped.Load() || runCtx.Err() != nil) {
			return // aborted by the bisect or by a dead server: not an outcome
		}
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
	tail.setPublisher(pub)
	defer tail.setPublisher(nil)
	go e.watch(runCtx, cancel, health, srv.exitedChan())
	if _, err := repro.Preflight(runCtx, ho); err != nil {
		if ctx.Err() == nil && runCtx.Err() == nil {
			serverGone(runCtx, health) // a dead server fails the probe before its exit is seen
		}
		if cause := context.Cause(runCtx); cause != nil && ctx.Err() == nil {
			err = cause
		}
		return srv.withTail(fmt.Errorf("preflight: %w", err))
	}
	for w := range maxWaves(seg.Sessions, ho.Concurrency) {
		wave := ho
		wave.Seed = seg.WaveSeed(w)
		wave.Run = fmt.Sprintf("bisect-%s-%d-w%d", seg.Arm, seg.Index, w)
		wave.OnSession = func(i int, sr repro.SessionResult) {
			if stopped.Load() || runCtx.Err() != nil {
				return // the server died or we stopped: what finishes now is not evidence
			}
			if observe(w*ho.Concurrency+i, fmt.Sprintf("w%d/%s", w, sr.ID), sr.Outcome) {
				stopped.Store(true)
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
		if errors.Is(runErr, repro.ErrServerLost) && ctx.Err() == nil && runCtx.Err() == nil {
			serverGone(runCtx, health)
		}
		cause := context.Cause(runCtx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(cause, errStopped):
			return nil
		case cause != nil:
			return srv.withTail(cause)
		case runErr != nil:
			return runErr
		}
	}
	return errWavesExhausted(seg.Sessions)
}

// watch cancels the segment when the server exits or stops answering its
// health URL (healthMisses polls in a row).
func (e *Server) watch(ctx context.Context, cancel context.CancelCauseFunc, health string, exited chan error) {
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	c := &http.Client{Timeout: healthEvery}
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-exited:
			cancel(fmt.Errorf("the server exited during the sessions (%v)", exitText(err)))
			return
		case <-tick.C:
		}
		if err := getHealth(ctx, c, health); err != nil {
			if ctx.Err() != nil {
				return
			}
			if misses++; misses >= healthMisses {
				cancel(fmt.Errorf("the server stopped answering %s (%d polls in a row: %v)", health, misses, err))
				return
			}
			continue
		}
		misses = 0
	}
}

// lostGrace is how long a segment whose server stopped answering waits
// for the watch to see the server's exit.
const lostGrace = 2 * time.Second

// serverGone reports whether health has stopped answering and, if so, the
// segment's cause once the watch has seen the server exit (nil when it has
// not within lostGrace). A dead server fails the preflight probe, or makes
// the harness stop with repro.ErrServerLost, before its exit is seen (the
// harness does not count the sessions it cut: a killed server's in-flight
// sessions once read 8/8 "corrupted" and decided the arm); the exit, with
// its log tail, is the better error.
func serverGone(ctx context.Context, health string) (bool, error) {
	if getHealth(ctx, &http.Client{Timeout: healthEvery}, health) == nil {
		return false, nil
	}
	t := time.NewTimer(lostGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true, context.Cause(ctx)
	case <-t.C:
		return true, nil
	}
}

func getHealth(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
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
	for {
		err := getHealth(ctx, c, url)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return fmt.Errorf("the server exited before it was healthy (%s)", exitText(err))
		case <-deadline.C:
			return fmt.Errorf("the server was not healthy at %s after %s (last: %v)", url, timeout, err)
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
