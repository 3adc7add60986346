package hook

import (
	"encoding/json"
	"strings"
	"testing"
)

// Unknown is not false: an absent or null boolean setting reads as nil, and
// the guesses older bundles wrote read as unknown too.
func TestRunConfigUnknownSettings(t *testing.T) {
	for _, tc := range []struct {
		name, body  string
		graph, over *bool
		extra       int
	}{
		{"absent", `{"config":{"engine":"remote","seed":1}}`, nil, nil, 0},
		{"null", `{"config":{"engine":"sglang","cuda_graph":null,"multi_stream_overlap":null,"seed":1}}`, nil, nil, 0},
		{"stated", `{"config":{"engine":"sglang","cuda_graph":false,"multi_stream_overlap":true,"seed":1}}`, Bool(false), Bool(true), 0},
		// repro before provenance: false for a server it never asked.
		{"legacy repro", `{"config":{"engine":"remote","cuda_graph":false,"multi_stream_overlap":false,"seed":1}}`, nil, nil, 0},
		// repro with provenance: a server-reported false is false.
		{"reported", `{"config":{"engine":"remote","cuda_graph":false,"provenance":{"cuda_graph":"server"},"seed":1}}`, Bool(false), nil, 0},
		// wrap before provenance: unknown kept in extra beside a false.
		{"legacy wrap", `{"config":{"engine":"sglang","cuda_graph":false,"multi_stream_overlap":true,"extra":{"cuda_graph":"unknown","k":"v"},"seed":1}}`, nil, Bool(true), 1},
	} {
		line := `{"v":1,"kind":"run.start","ts_ns":1,"body":` + tc.body + `}`
		ev, _, err := DecodeJSONLine([]byte(line))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c := ev.Body.(*RunStart).Config
		if !eqBool(c.CUDAGraph, tc.graph) || !eqBool(c.MultiStreamOverlap, tc.over) || len(c.Extra) != tc.extra {
			t.Errorf("%s: cuda_graph %v multi_stream_overlap %v extra %v", tc.name, show(c.CUDAGraph), show(c.MultiStreamOverlap), c.Extra)
		}
		// What is read is written back the same way.
		b, _ := json.Marshal(c)
		var again RunConfig
		if err := json.Unmarshal(b, &again); err != nil || !eqBool(again.CUDAGraph, c.CUDAGraph) || !eqBool(again.MultiStreamOverlap, c.MultiStreamOverlap) {
			t.Errorf("%s: round trip %s: %v", tc.name, b, err)
		}
	}
	if b, _ := json.Marshal(RunConfig{Engine: "remote"}); strings.Contains(string(b), "cuda_graph") {
		t.Errorf("unknown written as a value: %s", b)
	}
	_, _, err := DecodeJSONLine([]byte(`{"v":1,"kind":"run.start","ts_ns":1,"body":{"config":{"cuda_graph":3}}}`))
	if err == nil || !strings.Contains(err.Error(), "cuda_graph") {
		t.Errorf("a number for cuda_graph: %v", err)
	}
}

func eqBool(a, b *bool) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func show(b *bool) string {
	if b == nil {
		return "unknown"
	}
	if *b {
		return "true"
	}
	return "false"
}
