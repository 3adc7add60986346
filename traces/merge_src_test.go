package traces

import (
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// canonicalSrc finds a writer's src object without decoding the line, and
// says when a line is not in the writers' member order (the slow path reads
// those); both paths agree on the producer.
func TestCanonicalSrc(t *testing.T) {
	for _, tc := range []struct {
		line string
		raw  string
		ok   bool
		want hook.Source
	}{
		{`{"v":1,"kind":"replay","ts_ns":5,"src":{"node":"n}1","proc":"p\"}","pid":7},"body":{}}`, `{"node":"n}1","proc":"p\"}","pid":7}`, true,
			hook.Source{Node: "n}1", Proc: `p"}`, PID: 7}},
		{`{"v":1,"kind":"replay","ts_ns":5,"src":{"node":"a","pid":7},"body":{"x":"}"}}`, `{"node":"a","pid":7}`, true, hook.Source{Node: "a", PID: 7}},
		{`{"v":1,"kind":"replay","ts_ns":-5,"run":"r","body":{"src":{"pid":9}}}`, "", true, hook.Source{}},
		{`{"kind":"replay","v":1,"ts_ns":5,"src":{"pid":7},"body":{}}`, "", false, hook.Source{PID: 7}},
		{`{"v":1,"kind":"replay","ts_ns":5,"src":{"pid":7`, "", false, hook.Source{}},
	} {
		raw, ok := canonicalSrc([]byte(tc.line))
		if string(raw) != tc.raw || ok != tc.ok {
			t.Errorf("canonicalSrc(%s) = %q %v, want %q %v", tc.line, raw, ok, tc.raw, tc.ok)
		}
		if got := lineSrc([]byte(tc.line)); got != tc.want {
			t.Errorf("lineSrc(%s) = %+v, want %+v", tc.line, got, tc.want)
		}
	}
}
