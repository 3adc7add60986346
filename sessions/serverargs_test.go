package sessions

// A/B over settings the repro harness records from a server's own report.

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/repro"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// sglangInfo is a /get_server_info body shaped like SGLang's: server args,
// scheduler info and live internal state.
func sglangInfo(maxBS int, disableGraph bool, port int) string {
	dg := "false"
	if disableGraph {
		dg = "true"
	}
	return `{"model_path":"deepseek-ai/DeepSeek-V3.2","tokenizer_path":"deepseek-ai/DeepSeek-V3.2","host":"0.0.0.0","port":` + strconv.Itoa(port) +
		`,"random_seed":` + strconv.Itoa(port+1) + `,"disable_cuda_graph":` + dg + `,"cuda_graph_max_bs":` + strconv.Itoa(maxBS) +
		`,"disaggregation_mode":"decode","max_running_requests":null,"max_total_num_tokens":700000,"tp_size":8,"kv_cache_dtype":"auto",` +
		`"chunked_prefill_size":8192,"max_prefill_tokens":16384,"enable_two_batch_overlap":false,` +
		`"internal_states":[{"last_gen_throughput":` + strconv.Itoa(port%97) + `.5,"avg_spec_accept_length":null}],"version":"0.5.` + strconv.Itoa(port%7) + `"}`
}

// Two real-server runs that differ in one server-reported arg: ab names it
// without labels, and what differs between any two launches (port, seed,
// version, live throughput) is not an engine setting.
func TestABFromServerArgs(t *testing.T) {
	cfg := func(body string) hook.RunConfig {
		rc := hook.RunConfig{Engine: "remote", Sessions: 80, Rounds: 4, Concurrency: 80}
		var obj map[string]any
		if err := json.Unmarshal([]byte(body), &obj); err != nil {
			t.Fatal(err)
		}
		repro.ApplyServerInfo(&rc, repro.ServerInfo{Endpoint: "/get_server_info", Args: repro.FlattenArgs(obj)})
		return rc
	}
	for _, tc := range []struct {
		a, b string
		flag string
		va   any
		vb   any
	}{
		{sglangInfo(32, false, 30000), sglangInfo(64, false, 30001), "cuda_graph_max_bs", 32, 64},
		{sglangInfo(32, false, 30000), sglangInfo(32, true, 30002), "cuda_graph", true, false},
		{sglangInfo(32, false, 30000), strings.Replace(sglangInfo(32, false, 30003), `"chunked_prefill_size":8192`, `"chunked_prefill_size":4096`, 1),
			"server.chunked_prefill_size", "8192", "4096"},
	} {
		A := statsRunSpec{cfg: cfg(tc.a), outcomes: outcome.Counts{MaxRounds: 70, Leak: 10}, rounds: 4}.stats("a")
		B := statsRunSpec{cfg: cfg(tc.b), outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
		r := Compare(A, B, CompareOptions{})
		if r.FlagUnderTest == nil || r.FlagUnderTest.Name != tc.flag || r.FlagUnderTest.A != tc.va || r.FlagUnderTest.B != tc.vb || len(r.DifferingFlags) != 1 {
			t.Errorf("%s: flag under test %+v, differing %+v", tc.flag, r.FlagUnderTest, r.DifferingFlags)
		}
		var b strings.Builder
		r.WriteText(&b)
		if !strings.Contains(b.String(), "flag under test: "+tc.flag) || !strings.Contains(b.String(), "(reported by the server)") {
			t.Errorf("%s: text\n%s", tc.flag, b.String())
		}
	}
}

// Unknown is not a value: a setting one run does not know is not a
// difference, and the report says what it could not compare.
func TestABUnknownSettings(t *testing.T) {
	a := hook.RunConfig{Engine: "remote", Sessions: 80, Rounds: 4, Concurrency: 80}
	b := a
	b.CUDAGraph, b.Provenance = hook.Bool(false), map[string]string{"cuda_graph": hook.ProvLabel}
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 70, Leak: 10}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	r := Compare(A, B, CompareOptions{})
	if r.FlagUnderTest != nil || len(r.DifferingFlags) != 0 {
		t.Fatalf("an unknown setting was compared: %+v %+v", r.FlagUnderTest, r.DifferingFlags)
	}
	var b2 strings.Builder
	r.WriteText(&b2)
	for _, want := range []string{"cuda_graph is false in run B (labelled) but unknown in run A: not compared",
		"multi_stream_overlap unknown in both runs"} {
		if !strings.Contains(b2.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b2.String())
		}
	}
	r = Compare(A, A, CompareOptions{Flag: "cuda_graph"})
	if !strings.Contains(strings.Join(r.Notes, "\n"), `the flag under test "cuda_graph" is unknown in both runs`) {
		t.Errorf("notes %q", r.Notes)
	}
}

// inject is kvcanary's own: known in every run, so naming it is never an
// "unknown" flag.
func TestABInjectAlwaysKnown(t *testing.T) {
	a := hook.RunConfig{Engine: "remote", Sessions: 80, Rounds: 4, Concurrency: 80, CUDAGraphMaxBS: 32}
	b := a
	b.CUDAGraphMaxBS = 64
	A := statsRunSpec{cfg: a, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("a")
	B := statsRunSpec{cfg: b, outcomes: outcome.Counts{MaxRounds: 80}, rounds: 4}.stats("b")
	r := Compare(A, B, CompareOptions{Flag: "inject"})
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, `the flag under test "inject" has the same value in both runs`) || strings.Contains(notes, `"inject" is unknown`) {
		t.Errorf("notes %q", r.Notes)
	}
}
