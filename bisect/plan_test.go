package bisect

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestParsePlanErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, plan, want string }{
		{"syntax", "[server\nengine = 1", "plan p.toml:2:"},
		{"unknown key", "[server]\nengnie = \"twin\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]", "unknown key server.engnie"},
		{"engine", "[server]\nengine = \"docker\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]", `server.engine "docker"`},
		{"no flags placeholder", "[server]\nengine = \"command\"\ncommand = \"serve --port {port}\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]", "{flags}"},
		{"manual needs url", "[server]\nengine = \"manual\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]", "needs server.url"},
		{"no arms", "[server]\nengine = \"twin\"", "no [[arm]]"},
		{"arm without flags", "[[arm]]\nname = \"a\"", `arm "a": no flags`},
		{"duplicate arm", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[[arm]]\nname = \"a\"\nflags = [\"--y\"]", "used twice"},
		{"arm named baseline", "[[arm]]\nname = \"baseline\"\nflags = [\"--x\"]", "used twice"},
		{"bad arm name", "[[arm]]\nname = \"a/b\"\nflags = [\"--x\"]", `name "a/b"`},
		{"alpha", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[stats]\nalpha = 2.0", "stats: alpha 2"},
		{"budget", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[stats]\nbudget = 4\nbatch = 8", "stats: budget 4"},
		{"duration", "[server]\nengine = \"manual\"\nurl = \"http://h:1\"\nstartup_timeout = \"soon\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]", `server.startup_timeout "soon"`},
		// Issue 27 D7/D17: every number is bounded where the user wrote it.
		{"rounds on the twin", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[workload]\nrounds = 100000000", "workload.rounds 100000000: want 1 to 32"},
		{"rounds over http", "[server]\nengine = \"manual\"\nurl = \"http://h:1\"\n[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[workload]\nrounds = 100000000", "workload.rounds 100000000: want 1 to 1000"},
		{"concurrency", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[workload]\nconcurrency = 9000000000", "workload.concurrency 9000000000"},
		{"batch overflowing 4×batch", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[stats]\nbatch = 4611686018427387903", "stats.batch 4611686018427387903"},
		{"budget huge", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[stats]\nbudget = 9223372036854775807", "stats.budget 9223372036854775807"},
		{"twin with http settings", "[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[workload]\ntool_time = \"1s\"", "HTTP settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePlan([]byte(tc.plan), "p.toml")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "p.toml") {
				t.Fatalf("error %v, want one naming p.toml and %q", err, tc.want)
			}
		})
	}
}

func TestParsePlanDefaults(t *testing.T) {
	p, err := ParsePlan([]byte("[server]\nengine = \"command\"\ncommand = \"srv --port {port} {flags}\"\n[baseline]\nflags = [\"--a\", \"1\"]\n[[arm]]\nname = \"b\"\nflags = [\"--b\"]"), "p")
	if err != nil {
		t.Fatal(err)
	}
	d := p.Design()
	if d.Alpha != DefaultAlpha || d.Beta != DefaultBeta || d.MinEffect != DefaultMinEffect || d.Budget != DefaultBudget || d.Batch != DefaultBatch || d.Arms != 1 {
		t.Errorf("design %+v", d)
	}
	if p.Server.URL != "http://127.0.0.1:{port}" || p.Server.Health != "http://127.0.0.1:{port}/health" || p.Stats.BaselineStart != 64 {
		t.Errorf("server %+v, baseline start %d", p.Server, p.Stats.BaselineStart)
	}
	if got := strings.Join(p.ArmFlags(0), " "); got != "--a 1 --b" {
		t.Errorf("arm flags %q, want the baseline's then the arm's", got)
	}
	if len(p.Digest) != 64 {
		t.Errorf("digest %q", p.Digest)
	}
}

// The shipped plans parse.
func TestExamplePlansParse(t *testing.T) {
	for _, f := range []string{"../examples/seeds.toml", "../examples/seeds-serve.toml"} {
		p, err := LoadPlan(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Arms) != 4 {
			t.Errorf("%s: %d arms", f, len(p.Arms))
		}
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
}

func TestShellQuote(t *testing.T) {
	got := ShellQuote([]string{"--a", "b c", "it's", "", "--x=1,2"})
	want := `--a 'b c' 'it'\''s' '' --x=1,2`
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// Issue 27 D18: flags with a newline or a control character are shown on one
// line, in bash's $'…' form, which pastes back as the same arguments.
func TestShellQuoteDisplay(t *testing.T) {
	args := []string{"--x", "a b", "line1\nline2", "esc\x1b[31mred", "it's", "bidi\u202eevil", "ok"}
	got := ShellQuoteDisplay(args)
	if strings.ContainsAny(got, "\n\x1b\u202e") {
		t.Fatalf("raw control characters in %q", got)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to paste into")
	}
	out, err := exec.Command(bash, "-c", "printf '%s\\0' "+got).Output()
	if err != nil {
		t.Fatal(err)
	}
	back := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if !slices.Equal(back, args) {
		t.Fatalf("pasted into bash: %q, want %q (shown as %s)", back, args, got)
	}
}

// A state saved when Nothing was called "changes nothing" resumes with the
// same decision under its new name ("does not remove it", the demo's words).
func TestLoadStateRenamesChangesNothing(t *testing.T) {
	p, err := ParsePlan([]byte("[[arm]]\nname = \"a\"\nflags = [\"--x\"]\n[[arm]]\nname = \"b\"\nflags = [\"--y\"]"), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	st := NewState(p)
	st.Arms[1].Decision, st.Arms[2].Decision = "changes nothing", Removes
	dir := t.TempDir()
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Arms[1].Decision != Nothing || got.Arms[2].Decision != Removes || Nothing != "does not remove it" {
		t.Errorf("decisions %q %q, want %q %q", got.Arms[1].Decision, got.Arms[2].Decision, Nothing, Removes)
	}
}
