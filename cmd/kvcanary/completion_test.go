package main

import (
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/sim"
)

// TestCompletion: enum flags offer their values, bundle arguments *.kvtrace.
func TestCompletion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // lines of the completion, the directive last
	}{
		{[]string{"__complete", "sim", "run", "--index-k-dtype", ""}, []string{"bf16", "fp8", ":4"}},
		{[]string{"__complete", "sim", "run", "--disaggregation", "n"}, []string{"none", ":4"}},
		{[]string{"__complete", "sim", "run", "--canary-policy", "s"}, []string{"sweep:", ":6"}},
		{[]string{"__complete", "sim", "run", "--inject", ""}, append(append([]string(nil), sim.Faults...), ":4")},
		{[]string{"__complete", "trace", "cat", "--kind", "room"}, []string{"room.checksum", ":4"}},
		{[]string{"__complete", "doctor", "--require", "gpu,eb"}, []string{"gpu,ebpf", ":4"}},
		{[]string{"__complete", "ab", ""}, []string{"kvtrace", ":8"}},
		{[]string{"__complete", "canary", "report", ""}, []string{"kvtrace", "log", ":8"}},
		{[]string{"__complete", "sim", "run", "--record", ""}, []string{"kvtrace", ":8"}},
		// --format's values depend on the command (issue 23: trace export's had none).
		{[]string{"__complete", "trace", "export", "--format", ""}, []string{"perfetto", ":4"}},
		{[]string{"__complete", "report", "--format", ""}, []string{"html", "md", ":4"}},
	} {
		code, out, _ := runTest(t, tc.args...)
		if got := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%q: exit %d, got %q, want %q", tc.args[1:], code, got, tc.want)
		}
	}
}

// TestCompletionValuesValid: every value completion offers for an engine
// flag is one the twin accepts.
func TestCompletionValuesValid(t *testing.T) {
	for _, v := range enumFlagValues["index-k-dtype"] {
		c := sim.DefaultConfig()
		c.IndexKDtype = v
		if err := c.Validate(); err != nil {
			t.Errorf("--index-k-dtype %s: %v", v, err)
		}
	}
	for _, v := range enumFlagValues["disaggregation"] {
		c := sim.DefaultConfig()
		c.Disaggregation = v
		if err := c.Validate(); err != nil {
			t.Errorf("--disaggregation %s: %v", v, err)
		}
	}
	for _, v := range enumFlagValues["canary-policy"] {
		if strings.HasSuffix(v, ":") {
			v += "8"
		}
		c := sim.DefaultConfig()
		c.Instruments = sim.AllInstruments()
		c.Instruments.CanaryPolicy = v
		if err := c.Validate(); err != nil {
			t.Errorf("--canary-policy %s: %v", v, err)
		}
	}
}
