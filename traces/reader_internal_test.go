package traces

import (
	"math"
	"strconv"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

func TestEventPrefixTimestamps(t *testing.T) {
	for _, ts := range []int64{0, 1, -1, 1_796_202_000_000_000_000, math.MaxInt64, math.MinInt64, -999999999999999999} {
		line := `{"v":1,"kind":"replay","ts_ns":` + strconv.FormatInt(ts, 10) + `,"body":{}}`
		k, got, ok := hook.PeekCanonicalJSONLine([]byte(line))
		if !ok || k != hook.KindReplay || got != ts {
			t.Errorf("%s: kind %v ts %d ok %v", line, k, got, ok)
		}
	}
	for _, bad := range []string{
		`{"v":1,"kind":"replay","ts_ns":9223372036854775808,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":-9223372036854775809,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":99999999999999999999,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":-,"body":{}}`,
		`{"v":1,"kind":"replay","ts_ns":12`,
		`{"v":1,"kind":"replay","ts_ns":1.5,"body":{}}`,
		`{"v":1,"kind":"warp","ts_ns":1,"body":{}}`,
	} {
		if _, _, ok := hook.PeekCanonicalJSONLine([]byte(bad)); ok {
			t.Errorf("%s: accepted by the fast path", bad)
		}
	}
}

func TestKindOf(t *testing.T) {
	for _, k := range hook.Kinds() {
		if got := hook.KindByName([]byte(k.String())); got != k {
			t.Errorf("KindByName(%q) = %v", k, got)
		}
	}
	if got := hook.KindByName([]byte("nope")); got != hook.KindInvalid {
		t.Errorf("KindByName(nope) = %v", got)
	}
}
