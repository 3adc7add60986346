package bisect

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

// Plan is a bisect plan file (TOML; see examples/seeds.toml):
//
//	[server]    how each arm's server runs: engine = "twin" (in process),
//	            "command" (a launch command template) or "manual"
//	[baseline]  flags = [...] of the baseline
//	[[arm]]     name = "...", flags = [...] added to the baseline's
//	[workload]  the sessions each arm runs
//	[stats]     the sequential test (see Design)
type Plan struct {
	Server   ServerSpec   `toml:"server"`
	Baseline BaselineSpec `toml:"baseline"`
	Arms     []ArmSpec    `toml:"arm"`
	Workload WorkloadSpec `toml:"workload"`
	Stats    StatsSpec    `toml:"stats"`

	Path   string `toml:"-"` // the file it came from
	Digest string `toml:"-"` // hex SHA-256 of its bytes (a resumed bisect must use the same plan)
}

// Engines.
const (
	EngineTwin    = "twin"
	EngineCommand = "command"
	EngineManual  = "manual"
)

// ServerSpec says how an arm's server runs.
type ServerSpec struct {
	Engine string `toml:"engine"`
	// Command is run with /bin/sh -c in its own process group after
	// {port}, {flags} (the arm's flags, shell-quoted) and {self} (this
	// kvcanary binary) are replaced.
	Command        string            `toml:"command"`
	Env            map[string]string `toml:"env"`
	Health         string            `toml:"health"` // URL polled until it answers 200 (default {url}/health)
	URL            string            `toml:"url"`    // the OpenAI-compatible server (default http://127.0.0.1:{port})
	StartupTimeout string            `toml:"startup_timeout"`
	StopGrace      string            `toml:"stop_grace"`
	// Log is a server log file to scan instead of the captured output
	// ({arm} is replaced by the arm's name); empty: the command's captured
	// stdout and stderr.
	Log string `toml:"log"`

	startup, grace time.Duration
}

// BaselineSpec is the baseline's flags.
type BaselineSpec struct {
	Flags []string `toml:"flags"`
}

// ArmSpec is one candidate change: flags added to the baseline's (later
// flags win, as in argparse), one flag or a named combination.
type ArmSpec struct {
	Name  string   `toml:"name"`
	Flags []string `toml:"flags"`
}

// WorkloadSpec is what each arm runs, as repro's flags say it.
type WorkloadSpec struct {
	Rounds        int      `toml:"rounds"`
	Concurrency   int      `toml:"concurrency"`
	Seed          int64    `toml:"seed"`
	ToolTime      string   `toml:"tool_time"`
	Conversations string   `toml:"conversations"`
	Temperature   *float64 `toml:"temperature"`
	TopP          *float64 `toml:"top_p"`
	MaxTokens     int      `toml:"max_tokens"`
	Stream        bool     `toml:"stream"`
	Timeout       string   `toml:"timeout"`
	Model         string   `toml:"model"`
}

// StatsSpec is the sequential test's settings.
type StatsSpec struct {
	Alpha         float64 `toml:"alpha"`
	Beta          float64 `toml:"beta"`
	MinEffect     float64 `toml:"min_effect"`
	Budget        int     `toml:"budget"`
	Batch         int     `toml:"batch"`
	BaselineStart int     `toml:"baseline_start"`
}

// Defaults.
const (
	DefaultAlpha     = 0.05
	DefaultBeta      = 0.10
	DefaultMinEffect = 0.10
	DefaultBudget    = 160
	DefaultBatch     = 16
)

var armName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+=-]{0,63}$`)

// LoadPlan reads and checks a plan file. Errors name the file and, where
// the TOML parser knows it, the line.
func LoadPlan(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	p, err := ParsePlan(b, path)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ParsePlan parses a plan's bytes; name is used in errors.
func ParsePlan(b []byte, name string) (*Plan, error) {
	var p Plan
	md, err := toml.Decode(string(b), &p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("plan %s:%d: %s", name, pe.Position.Line, pe.Message)
		}
		return nil, fmt.Errorf("plan %s: %w", name, err)
	}
	if u := md.Undecoded(); len(u) > 0 {
		keys := make([]string, len(u))
		for i, k := range u {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("plan %s: unknown key %s (see kvcanary bisect --help for the plan's keys)", name, strings.Join(keys, ", "))
	}
	sum := sha256.Sum256(b)
	p.Path, p.Digest = name, hex.EncodeToString(sum[:])
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("plan %s: %w", name, err)
	}
	return &p, nil
}

func (p *Plan) check() error {
	s := &p.Server
	if s.Engine == "" {
		s.Engine = EngineTwin
	}
	switch s.Engine {
	case EngineTwin:
		if s.Command != "" {
			return fmt.Errorf("server.command is set but server.engine is %q: set engine = \"command\" to launch it", s.Engine)
		}
	case EngineCommand:
		if !strings.Contains(s.Command, "{flags}") {
			return fmt.Errorf("server.command %q: want a template with {flags} where the arm's flags go (and {port}, or a fixed url)", s.Command)
		}
		if s.URL == "" {
			if !strings.Contains(s.Command, "{port}") {
				return fmt.Errorf("server.command has no {port}: give server.url, where the server listens")
			}
			s.URL = "http://127.0.0.1:{port}"
		}
	case EngineManual:
		if s.URL == "" {
			return fmt.Errorf("server.engine = \"manual\" needs server.url (where you start the server)")
		}
		if strings.Contains(s.URL+s.Health, "{port}") {
			return fmt.Errorf("server.url %q: a manual server listens where you start it: give its port, not {port}", s.URL)
		}
	default:
		return fmt.Errorf("server.engine %q: want twin, command or manual", s.Engine)
	}
	if s.Health == "" && s.Engine != EngineTwin {
		s.Health = strings.TrimRight(s.URL, "/") + "/health"
	}
	var err error
	if s.startup, err = durationOr(s.StartupTimeout, 10*time.Minute, "server.startup_timeout"); err != nil {
		return err
	}
	if s.grace, err = durationOr(s.StopGrace, 30*time.Second, "server.stop_grace"); err != nil {
		return err
	}
	if len(p.Arms) == 0 {
		return fmt.Errorf("no [[arm]]: give at least one candidate change")
	}
	seen := map[string]bool{"baseline": true}
	for i, a := range p.Arms {
		switch {
		case !armName.MatchString(a.Name):
			return fmt.Errorf("arm %d: name %q: want 1-64 letters, digits or ._+=- (it names the arm's bundles)", i+1, a.Name)
		case seen[a.Name]:
			return fmt.Errorf("arm %d: name %q used twice (or it is \"baseline\")", i+1, a.Name)
		case len(a.Flags) == 0:
			return fmt.Errorf("arm %q: no flags: an arm is a change against the baseline", a.Name)
		}
		seen[a.Name] = true
	}
	w := &p.Workload
	if w.Rounds == 0 {
		w.Rounds = 4
	}
	if w.Concurrency == 0 {
		w.Concurrency = 80
	}
	if w.Seed < 0 {
		return fmt.Errorf("workload.seed %d: want 0 or more", w.Seed)
	}
	maxRounds := MaxHTTPRounds
	if p.Server.Engine == EngineTwin {
		maxRounds = sim.MaxRounds
	}
	if err := bounded("workload.rounds", w.Rounds, 1, maxRounds); err != nil {
		return err
	}
	if err := bounded("workload.concurrency", w.Concurrency, 1, MaxConcurrency); err != nil {
		return err
	}
	if err := bounded("workload.max_tokens", w.MaxTokens, 0, MaxPlanTokens); err != nil {
		return err
	}
	if p.Server.Engine == EngineTwin && (w.ToolTime != "" || w.Conversations != "" || w.Temperature != nil || w.TopP != nil || w.MaxTokens != 0 || w.Stream || w.Model != "") {
		return fmt.Errorf("workload: tool_time, conversations, sampling, stream and model are HTTP settings; the twin engine runs its own scripted sessions (use engine = \"command\" with kvcanary sim serve to set them)")
	}
	st := &p.Stats
	if st.Alpha == 0 {
		st.Alpha = DefaultAlpha
	}
	if st.Beta == 0 {
		st.Beta = DefaultBeta
	}
	if st.MinEffect == 0 {
		st.MinEffect = DefaultMinEffect
	}
	if st.Batch == 0 {
		st.Batch = DefaultBatch
	}
	if st.Budget == 0 {
		st.Budget = DefaultBudget
	}
	// Bounded before anything is derived from them (baseline_start is 4×batch
	// by default): an error names a value the user wrote, never an overflow.
	if err := bounded("stats.budget", st.Budget, 1, MaxBudget); err != nil {
		return err
	}
	if err := bounded("stats.batch", st.Batch, 1, MaxBudget); err != nil {
		return err
	}
	if st.BaselineStart == 0 {
		st.BaselineStart = min(st.Budget, 4*st.Batch)
	}
	if st.BaselineStart < 1 || st.BaselineStart > st.Budget {
		return fmt.Errorf("stats.baseline_start %d: want 1 to budget (%d)", st.BaselineStart, st.Budget)
	}
	if err := p.Design().Validate(); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}

// Plan number bounds (workload.rounds on the twin: sim.MaxRounds).
const (
	MaxHTTPRounds  = 1000      // workload.rounds against an HTTP server
	MaxConcurrency = 10000     // workload.concurrency (sim run's --sessions bound)
	MaxPlanTokens  = 1 << 20   // workload.max_tokens
	MaxBudget      = 1_000_000 // stats.budget: sessions per arm
)

// bounded checks that the plan's key holds lo to hi.
func bounded(key string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s %d: want %d to %d", key, v, lo, hi)
	}
	return nil
}

func durationOr(s string, def time.Duration, key string) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q: want a positive duration such as 90s or 5m", key, s)
	}
	return d, nil
}

// Design is the plan's sequential test.
func (p *Plan) Design() Design {
	st := p.Stats
	return Design{Alpha: st.Alpha, Beta: st.Beta, MinEffect: st.MinEffect, Budget: st.Budget, Batch: st.Batch, Arms: len(p.Arms)}
}

// ArmFlags is the full flag list of arm i (−1: the baseline).
func (p *Plan) ArmFlags(i int) []string {
	f := append([]string(nil), p.Baseline.Flags...)
	if i >= 0 {
		f = append(f, p.Arms[i].Flags...)
	}
	return f
}

// ShellQuoteDisplay is ShellQuote for a terminal or a report: an argument
// holding a newline or another control character is written in bash's
// $'…' form with escapes (\n, \x1b), so it shows on one line, cannot move
// the cursor, and still pastes into bash as the same argument.
func ShellQuoteDisplay(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.IndexFunc(a, func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }) < 0 && utf8.ValidString(a) {
			out[i] = ShellQuote([]string{a})
			continue
		}
		var b strings.Builder
		b.WriteString("$'")
		for _, c := range []byte(a) {
			switch {
			case c == '\\' || c == '\'':
				b.WriteByte('\\')
				b.WriteByte(c)
			case c == '\n':
				b.WriteString(`\n`)
			case c == '\t':
				b.WriteString(`\t`)
			case c < ' ' || c >= 0x7f:
				fmt.Fprintf(&b, `\x%02x`, c)
			default:
				b.WriteByte(c)
			}
		}
		b.WriteByte('\'')
		out[i] = b.String()
	}
	return strings.Join(out, " ")
}

// ShellQuote quotes args for /bin/sh.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// HarnessOptions is the workload of the HTTP engines (command, manual):
// repro's settings from [workload]. The API key, if any, comes from
// OPENAI_API_KEY, as repro's does; it is never recorded.
func (p *Plan) HarnessOptions() (repro.HarnessOptions, error) {
	w := p.Workload
	ho := repro.HarnessOptions{Rounds: w.Rounds, Concurrency: w.Concurrency, Stream: w.Stream, MaxTokens: w.MaxTokens,
		Model: w.Model, APIKey: os.Getenv("OPENAI_API_KEY")}
	tt := w.ToolTime
	if tt == "" {
		tt = "1.5s-6s" // repro's default
	}
	var err error
	if ho.ToolTime, err = repro.ParseToolTime(tt); err != nil {
		return ho, fmt.Errorf("plan %s: workload.tool_time: %w", p.Path, err)
	}
	if ho.Timeout, err = durationOr(w.Timeout, 2*time.Minute, "workload.timeout"); err != nil {
		return ho, fmt.Errorf("plan %s: %w", p.Path, err)
	}
	ho.Sampling = repro.Sampling{Temperature: w.Temperature, TopP: w.TopP}
	if w.Conversations != "" {
		path := w.Conversations
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(p.Path), path) // relative to the plan
		}
		convs, digest, err := repro.LoadConversations(path)
		if err != nil {
			return ho, fmt.Errorf("plan %s: workload.conversations: %w", p.Path, err)
		}
		ho.Conversations, ho.ConversationsName, ho.ConversationsDigest = convs, path, digest
	}
	return ho, nil
}
