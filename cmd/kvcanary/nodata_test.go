package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/traces"
)

// reproOnlyBundle is what `kvcanary repro --record` against a remote server
// keeps: a run.start whose engine settings nobody observed (cuda_graph
// false is the zero value, not a fact) and session outcomes.
func reproOnlyBundle(t *testing.T) string {
	cfg := hook.RunConfig{Engine: "remote", URL: "http://127.0.0.1:30000", Model: "m", Sessions: 2}
	return writeBundle(t, traces.Manifest{Run: "r", Tool: "repro", Config: cfg},
		hook.Event{Kind: hook.KindRunStart, Body: &hook.RunStart{Tool: "repro", Config: cfg}},
		hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s1", Outcome: hook.OutcomeDone, Rounds: 3}},
		hook.Event{Kind: hook.KindSession, Body: &hook.Session{ID: "s2", Outcome: hook.OutcomeLeak, Rounds: 1}},
	)
}

// noDataRunners runs each analyzer command over one input.
var noDataRunners = map[cmdutil.Instrument]func(t *testing.T, path string, asJSON bool) (string, string, error){
	cmdutil.InstrumentChecksum: func(t *testing.T, path string, asJSON bool) (string, string, error) {
		return runChecksumCompare(t, false, asJSON, path)
	},
	cmdutil.InstrumentCanary: func(t *testing.T, path string, asJSON bool) (string, string, error) {
		return runCanaryReport(t, path, false, asJSON)
	},
	cmdutil.InstrumentGraphDiff: func(t *testing.T, path string, asJSON bool) (string, string, error) {
		return runGraphDiffReport(t, path, false, asJSON)
	},
}

// noDataProducers are what each sentence must name.
var noDataProducers = map[cmdutil.Instrument][]string{
	cmdutil.InstrumentChecksum:  {"no room.checksum events", "`kvcanary wrap`", "`kvcanary sim run --record`", "`kvcanary room_checksum` lines"},
	cmdutil.InstrumentCanary:    {"no canary.pages events", "`kvcanary wrap`", "`kvcanary sim run --record`", "`--kv-canary log`"},
	cmdutil.InstrumentGraphDiff: {"no graphdiff.sample events", "`kvcanary wrap`", "`kvcanary sim run --record`", "no engine log line"},
}

// checkNoData runs inst's command over path, as text and as JSON, and checks
// the shared contract: exit 4, one sentence naming the producers, and
// {"status": "no-data"} with the same sentence.
func checkNoData(t *testing.T, inst cmdutil.Instrument, path string, events uint64) *cmdutil.NoData {
	t.Helper()
	run := noDataRunners[inst]
	out, errOut, err := run(t, path, false)
	if code := cmdutil.ExitCode(err); code != cmdutil.ExitNoData {
		t.Fatalf("%s: exit %d (%v), want %d\nstdout:\n%s\nstderr:\n%s", inst, code, err, cmdutil.ExitNoData, out, errOut)
	}
	if err.Error() != "exit 4" {
		t.Errorf("%s: the error carries a message main would print again: %v", inst, err)
	}
	first, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, "no data: "+path+" holds ") {
		t.Errorf("%s: first line %q", inst, first)
	}
	for _, w := range noDataProducers[inst] {
		if !strings.Contains(first, w) {
			t.Errorf("%s: sentence %q does not name %q", inst, first, w)
		}
	}
	jout, _, jerr := run(t, path, true)
	if cmdutil.ExitCode(jerr) != cmdutil.ExitNoData {
		t.Fatalf("%s --json: exit %d (%v)", inst, cmdutil.ExitCode(jerr), jerr)
	}
	var nd cmdutil.NoData
	if err := json.Unmarshal([]byte(jout), &nd); err != nil {
		t.Fatalf("%s --json: %v\n%s", inst, err, jout)
	}
	if nd.Status != "no-data" || nd.Instrument != inst || nd.Input != path || nd.Read != events || nd.Unit != "events" || nd.Message != first {
		t.Errorf("%s --json: %+v; want status no-data, %d events, message %q", inst, nd, events, first)
	}
	return &nd
}

func TestChecksumCompareNoData(t *testing.T) {
	checkNoData(t, cmdutil.InstrumentChecksum, reproOnlyBundle(t), 3)
	checkNoData(t, cmdutil.InstrumentChecksum, writeBundle(t, traces.Manifest{Run: "empty"}), 0)

	// A log without room_checksum lines is the same absence, counted in lines.
	noRecs := filepath.Join(t.TempDir(), "server.log")
	if err := os.WriteFile(noRecs, []byte("[2026-01-01 10:00:00] Decode batch, #running-req: 1\nhello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runChecksumCompare(t, false, true, noRecs)
	var nd cmdutil.NoData
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData || json.Unmarshal([]byte(out), &nd) != nil || nd.Read != 2 || nd.Unit != "lines" {
		t.Fatalf("log without records: exit %d (%v), %+v", cmdutil.ExitCode(err), err, nd)
	}
	if !strings.Contains(nd.Message, "(2 lines read)") {
		t.Errorf("log message %q", nd.Message)
	}

	// With a readable side beside it, the side without records still names itself.
	pp, _ := seedLogs(t, 0)
	out, _, err = runChecksumCompare(t, false, false, pp, noRecs)
	if cmdutil.ExitCode(err) != cmdutil.ExitNoData || !strings.HasPrefix(out, "no data: "+noRecs+" holds ") {
		t.Fatalf("one side without records: exit %d (%v)\n%s", cmdutil.ExitCode(err), err, out)
	}

	// Records that are there but unusable are malformed input, not an
	// absence: a bad digest stops at its line, a record missing its room is
	// counted and named.
	for _, c := range []struct{ line, want string }{
		{"kvcanary room_checksum side=decode room=1 seq_len=100 pages=2 bsum=0x12 xxh3=0xnope", "bad.log:1: malformed xxh3 digest"},
		{"kvcanary room_checksum side=decode seq_len=100 pages=2 bsum=0x12 xxh3=0x13", "1 malformed checksum record, first: "},
	} {
		bad := filepath.Join(t.TempDir(), "bad.log")
		if err := os.WriteFile(bad, []byte(c.line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err = runChecksumCompare(t, false, false, bad)
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), c.want) {
			t.Errorf("malformed only %q: exit %d (%v), want 3 with %q", c.line, cmdutil.ExitCode(err), err, c.want)
		}
	}
}

func TestCanaryReportNoData(t *testing.T) {
	checkNoData(t, cmdutil.InstrumentCanary, reproOnlyBundle(t), 3)
	checkNoData(t, cmdutil.InstrumentCanary, writeBundle(t, traces.Manifest{Run: "empty"}), 0)
}

func TestGraphDiffReportNoData(t *testing.T) {
	// A repro bundle's cuda_graph false was never observed: no reason is
	// given (it used to say "CUDA graphs are disabled").
	nd := checkNoData(t, cmdutil.InstrumentGraphDiff, reproOnlyBundle(t), 3)
	if nd.Detail != "" {
		t.Errorf("repro bundle: detail %q, want none", nd.Detail)
	}
	out, _, _ := runGraphDiffReport(t, reproOnlyBundle(t), false, false)
	if strings.Contains(out, "disabled") || strings.Count(out, "\n") != 1 {
		t.Errorf("repro bundle report states a guessed setting:\n%s", out)
	}
	nd = checkNoData(t, cmdutil.InstrumentGraphDiff, writeBundle(t, traces.Manifest{Run: "empty"}), 0)
	if nd.Detail != "" {
		t.Errorf("empty bundle: detail %q", nd.Detail)
	}
}

// TestAnalyzersAgreeOnNoData is the "the three analyzers agree":
// one bundle, three commands, one exit code and one shape of sentence.
func TestAnalyzersAgreeOnNoData(t *testing.T) {
	path := reproOnlyBundle(t)
	var msgs []string
	for _, inst := range []cmdutil.Instrument{cmdutil.InstrumentChecksum, cmdutil.InstrumentCanary, cmdutil.InstrumentGraphDiff} {
		nd := checkNoData(t, inst, path, 3)
		msgs = append(msgs, nd.Message)
	}
	for _, m := range msgs {
		if !strings.HasPrefix(m, "no data: "+path+" holds no ") || !strings.Contains(m, " (3 events read): record them with `kvcanary wrap` (the SGLang hooks, instrument ") {
			t.Errorf("sentence out of the shared shape: %q", m)
		}
	}
}
