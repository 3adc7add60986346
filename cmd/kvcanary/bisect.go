package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/bisect"
	"github.com/kvcanary/kvcanary/internal/buildinfo"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/pipeline"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/tui"
)

// BisectOptions are the inputs of `kvcanary bisect`.
type BisectOptions struct {
	IO      *cmdutil.IOStreams
	Factory *cmdutil.Factory
	JSON    *cmdutil.JSONFlags

	Plan   string
	Out    string
	Resume bool
}

// bisectLong is the long help of `kvcanary bisect`.
const bisectLong = `Run the flag investigation of the seeds as one command: a baseline and one arm per
candidate change (a flag, or a named combination), each run against its own
server, judged against the baseline as the sessions come in.

The plan is a TOML file (examples/seeds.toml runs the seeds' investigation on
the twin; examples/seeds-serve.toml the same through kvcanary sim serve):

  [server]
  engine = "command"          # twin (in process), command, or manual
  command = "python3 -m sglang.launch_server --model-path M --port {port} {flags}"
  env = { CUDA_VISIBLE_DEVICES = "0,1" }
  health = "http://127.0.0.1:{port}/health"    # default: {url}/health
  url = "http://127.0.0.1:{port}"              # the OpenAI-compatible API
  startup_timeout = "10m"     # wait this long for health
  stop_grace = "30s"          # SIGTERM, then SIGKILL after this
  log = ""                    # a log file to scan ({arm} replaced); default:
                              # the command's own output
  [baseline]
  flags = ["--cuda-graph-max-bs", "32"]
  [[arm]]
  name = "fp8"
  flags = ["--index-k-dtype", "fp8"]   # added to the baseline's flags
  [workload]                  # repro's settings
  rounds = 4
  concurrency = 80            # sessions in flight, kept up while an arm runs
  seed = 1
  tool_time = "1.5s-6s"       # command/manual only, as are conversations,
                              # temperature, top_p, max_tokens, stream,
                              # timeout and model
  [stats]
  alpha = 0.05                # error of "removes it" claims, all arms together
  beta = 0.10                 # error of "does not remove it" claims
  min_effect = 0.10           # smallest reduction of the rate worth finding
  budget = 160                # most sessions per arm
  batch = 16                  # sessions between looks
  baseline_start = 64         # baseline sessions before the first arm

{port} is a free loopback port picked for each start, {flags} the arm's flags
(shell-quoted), {self} this kvcanary binary. A command runs with /bin/sh -c in
its own process group; its output is kept in OUT/ARM-N.log and scanned for
scheduler lines. With engine = "manual" kvcanary prints the flags to restart
your server with and waits for Enter.

Each arm runs until the evidence decides, looking every batch sessions:
"removes it" when Fisher's exact test (one-sided) says the arm corrupts less,
"does not remove it" when the upper confidence bound of the reduction is below
min_effect, "could not tell within budget" otherwise. The error is spent over
the looks with the Lan-DeMets Pocock-type spending function and split evenly
over the arms (Bonferroni). Sessions are counted in the order they started, so
sessions that end early (leaks) are not over-sampled. The baseline grows when
an arm needs more of it. A server that does not start or dies marks its arm
failed with its log tail; the other arms go on.

OUT is --out, or else a new directory for each run in kvcanary's state
directory ($XDG_STATE_HOME/kvcanary/bisect, or ~/.local/state/kvcanary/bisect),
named after the plan and the start time (seeds-20260101-120000); its path is
printed at the start and in the report. The state is saved after every look in
OUT/bisect-state.json: after Ctrl-C, --resume continues with nothing re-run
(without --out: the newest bisect of the same plan there). Every segment is
recorded as a bundle (OUT/ARM-N.kvtrace) for ab, checksum compare and the
other reports.

Exit codes: 0 the bisect finished (whatever it found), 2 usage, 3 a bad plan
or a baseline that could not run, 130 interrupted (resume with --resume).`

// NewCmdBisect builds `kvcanary bisect PLAN`.
func NewCmdBisect(f *cmdutil.Factory, runF func(*BisectOptions) error) *cobra.Command {
	opts := &BisectOptions{IO: f.IO, Factory: f}
	cmd := &cobra.Command{
		Use:   "bisect PLAN.toml",
		Short: "Find which server flag removes the corruption: A/B arms judged sequentially",
		Long:  bisectLong,
		Example: `  kvcanary bisect examples/seeds.toml
  kvcanary bisect examples/seeds-serve.toml --out /tmp/seeds
  kvcanary bisect plan.toml --out runs/plan --resume
  kvcanary bisect examples/seeds.toml --resume    # the newest bisect of seeds.toml
  kvcanary bisect plan.toml --json | jq '.verdict'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: runOnPath(opts, &opts.Plan, runF, bisectRun),
	}
	cmd.Flags().StringVar(&opts.Out, "out", "", "directory of the bundles, server logs and saved state (default: a new one per run in $XDG_STATE_HOME/kvcanary/bisect)")
	cmd.Flags().BoolVar(&opts.Resume, "resume", false, "continue the bisect saved in --out (without --out: the newest of this plan)")
	opts.JSON = cmdutil.AddJSONFlags(cmd)
	return cmd
}

func bisectRun(opts *BisectOptions) error {
	plan, err := bisect.LoadPlan(opts.Plan)
	if err != nil {
		return cmdutil.InputError(err)
	}
	out, st, err := bisectOutDir(opts, plan)
	if err != nil {
		return err
	}
	// On a terminal, a status line under the log says where the arm is.
	line := pipeline.NewStatusLine(opts.IO.ErrOut, opts.IO.IsStderrTTY() && !opts.JSON.JSON, opts.Factory.Now)
	defer line.Clear()
	logf := func(format string, args ...any) { line.Printf(format+"\n", args...) }
	eng, err := bisectEngine(opts, plan, logf)
	if err != nil {
		return err
	}
	r := &bisect.Runner{Plan: plan, Engine: eng, Out: out, State: st, Log: logf,
		Progress: func(arm string, counted, corrupted, target int) {
			line.Set(fmt.Sprintf("bisect: %s: %d/%d sessions counted, %d corrupted", arm, counted, target, corrupted))
		}}
	if st != nil {
		if err := r.LoadStats(); err != nil {
			logf("bisect: %v (confounds from the earlier segments are incomplete)", err)
		}
		logf("bisect: resuming %s from %s", plan.Path, filepath.Join(out, bisect.StateFile))
	}
	ctx := factoryCtx(opts.Factory)
	st, runErr := r.Run(ctx)
	rep := bisect.NewReport(plan, st, out)
	if errors.Is(runErr, context.Canceled) {
		logf("bisect: interrupted; %d sessions saved in %s; continue with: kvcanary bisect %s --out %s --resume",
			rep.Sessions, out, opts.Plan, out)
	}
	return bisectReport(opts, rep, runErr)
}

// bisectOutDir is the bisect's directory and, with --resume, the state
// saved there.
//
// Without --out each run gets a new directory in the user's state
// directory, StateDir("bisect")/PLAN-YYYYMMDD-HHMMSS: a bisect writes tens
// of megabytes of bundles, which belong neither beside the plan (often in
// a checkout) nor over an earlier bisect, and running the same command
// twice must work. --resume without --out continues the newest bisect of
// this plan there. A directory named with --out that holds a bisect is
// refused without --resume: the user chose it, so kvcanary neither adds a
// second bisect to it nor overwrites the first.
func bisectOutDir(opts *BisectOptions, plan *bisect.Plan) (string, *bisect.State, error) {
	out := opts.Out
	if out == "" {
		root, err := tui.StateDir("bisect")
		if err != nil {
			return "", nil, cmdutil.InputError(fmt.Errorf("bisect: %w", err))
		}
		if opts.Resume {
			return bisectLatest(root, plan)
		}
		if out, err = bisectNewDir(root, opts.Plan, opts.Factory.Now()); err != nil {
			return "", nil, cmdutil.InputError(fmt.Errorf("bisect: %w", err))
		}
		fmt.Fprintf(opts.IO.ErrOut, "bisect: writing to %s\n", out)
		return out, nil, nil
	}
	var st *bisect.State
	if opts.Resume {
		var err error
		if st, err = bisect.LoadState(out, plan); err != nil {
			return "", nil, cmdutil.InputError(err)
		}
	} else if _, err := os.Stat(filepath.Join(out, bisect.StateFile)); err == nil {
		return "", nil, cmdutil.UsageError("%s holds a bisect already: --resume to continue it, or choose another --out", out)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", nil, cmdutil.InputError(fmt.Errorf("bisect: %w", err))
	}
	return out, st, nil
}

// bisectDirName matches the directories bisectNewDir makes: the plan's
// name, the start time (UTC) and, when two start within a second, a number.
var bisectDirName = regexp.MustCompile(`^(.+)-(\d{8}-\d{6}(?:-\d+)?)$`)

// bisectNewDir makes a new directory for a bisect of plan under root.
func bisectNewDir(root, plan string, now time.Time) (string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	base := filepath.Join(root, bisectStem(plan)+"-"+now.UTC().Format("20060102-150405"))
	for i := 1; ; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil || !errors.Is(err, fs.ErrExist) {
			return dir, err
		}
	}
}

// bisectStem is the plan's file name without its extension.
func bisectStem(plan string) string {
	base := filepath.Base(plan)
	return strings.TrimSuffix(base, filepath.Ext(base))
}

// bisectLatest finds the newest bisect of plan under root (one whose saved
// state belongs to this plan) and loads its state.
func bisectLatest(root string, plan *bisect.Plan) (string, *bisect.State, error) {
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", nil, cmdutil.InputError(fmt.Errorf("resume: %w", err))
	}
	stem := bisectStem(plan.Path)
	var dirs []string
	for _, e := range entries {
		if m := bisectDirName.FindStringSubmatch(e.Name()); e.IsDir() && m != nil && m[1] == stem {
			dirs = append(dirs, e.Name())
		}
	}
	// Newest first: the names sort by start time (a -N suffix after its twin).
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		dir := filepath.Join(root, d)
		if st, err := bisect.LoadState(dir, plan); err == nil {
			return dir, st, nil
		}
	}
	return "", nil, cmdutil.InputError(fmt.Errorf("resume: no bisect of %s in %s: name its directory with --out", plan.Path, root))
}

// bisectReport prints the report (text or --json) and maps the run's end
// to the exit code: 0 finished, 130 interrupted, 3 a baseline that could
// not run.
func bisectReport(opts *BisectOptions, rep bisect.Report, runErr error) error {
	if err := writeJSONOr(opts.IO.Out, opts.JSON.JSON, rep, func() error { return rep.WriteText(opts.IO.Out) }); err != nil {
		return err
	}
	switch {
	case runErr == nil:
		return nil
	case errors.Is(runErr, context.Canceled):
		return runErr
	default:
		return cmdutil.InputError(fmt.Errorf("bisect: %w", runErr))
	}
}

// bisectEngine builds the plan's engine: the twin in process (its flags
// parsed as sim run parses them), or a server launched or restarted per arm.
func bisectEngine(opts *BisectOptions, plan *bisect.Plan, logf func(string, ...any)) (bisect.Engine, error) {
	tool := "kvcanary " + buildinfo.String()
	if plan.Server.Engine == bisect.EngineTwin {
		return &bisect.Twin{Rounds: plan.Workload.Rounds, Concurrency: plan.Workload.Concurrency, Tool: tool,
			Config: twinConfig}, nil
	}
	ho, err := plan.HarnessOptions()
	if err != nil {
		return nil, cmdutil.InputError(err)
	}
	ho.Tool, ho.Host = tool, localHost()
	self, err := os.Executable()
	if err != nil {
		self = "kvcanary"
	}
	eng := &bisect.Server{Spec: plan.Server, Harness: ho, Self: self, Log: logf}
	if plan.Server.Engine == bisect.EngineManual {
		in := bufio.NewReader(opts.IO.In)
		eng.Confirm = func(ctx context.Context, arm string, flags []string, url string) error {
			fmt.Fprintf(opts.IO.ErrOut, "bisect: %s: restart the server at %s with these flags, then press Enter:\n  %s\n",
				arm, url, bisect.ShellQuoteDisplay(flags))
			line := make(chan error, 1)
			go func() { _, err := in.ReadString('\n'); line <- err }()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-line:
				if err != nil {
					return fmt.Errorf("waiting for Enter: %w", err)
				}
				return nil
			}
		}
	}
	return eng, nil
}

// twinConfig parses an arm's flags with sim run's engine flags.
func twinConfig(flags []string, seed uint64) (sim.Config, error) {
	c := &cobra.Command{Use: "twin"}
	ef := addEngineFlags(c)
	if err := c.Flags().Parse(flags); err != nil {
		return sim.Config{}, err
	}
	if rest := c.Flags().Args(); len(rest) > 0 {
		return sim.Config{}, fmt.Errorf("unexpected argument %q", rest[0])
	}
	return ef.config(seed)
}
