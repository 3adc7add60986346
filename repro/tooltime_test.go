package repro

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
)

func TestParseToolTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ToolTime
		err  string
	}{
		{"1.5s-6s", ToolTime{1500 * time.Millisecond, 6 * time.Second}, ""},
		{" 250ms - 1s ", ToolTime{250 * time.Millisecond, time.Second}, ""},
		{"2s", ToolTime{2 * time.Second, 2 * time.Second}, ""},
		{"0", ToolTime{}, ""},
		{"0s-0s", ToolTime{}, ""},
		{"", ToolTime{}, "want MIN-MAX"},
		{"3s-1s", ToolTime{}, "below minimum"},
		{"1s-", ToolTime{}, "want MIN-MAX"},
		{"-1s", ToolTime{}, "want MIN-MAX"},
		{"fast", ToolTime{}, `"fast"`},
		{"1x-2s", ToolTime{}, `"1x-2s"`},
	} {
		got, err := ParseToolTime(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "tool time") {
				t.Errorf("ParseToolTime(%q) = %v, %v; want an error naming the tool time and containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseToolTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		if back, err := ParseToolTime(got.String()); err != nil || back != got {
			t.Errorf("ParseToolTime(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
	if DefaultToolTime.String() != "1.5s-6s" {
		t.Errorf("DefaultToolTime = %v, the help text says 1.5s-6s", DefaultToolTime)
	}
}

// TestToolTimeDelay: a delay is a pure function of seed, session and round,
// stays in [Min, Max], and varies across sessions and rounds (that is what
// spreads them out).
func TestToolTimeDelay(t *testing.T) {
	tt := ToolTime{Min: time.Second, Max: 4 * time.Second}
	seen := map[time.Duration]bool{}
	lo, hi := tt.Max, tt.Min
	for i := 0; i < 200; i++ {
		for r := 0; r < 4; r++ {
			d := tt.Delay(7, i, r)
			if d < tt.Min || d > tt.Max {
				t.Fatalf("Delay(7, %d, %d) = %v outside %v", i, r, d, tt)
			}
			if d != tt.Delay(7, i, r) {
				t.Fatalf("Delay(7, %d, %d) is not deterministic", i, r)
			}
			seen[d] = true
			lo, hi = min(lo, d), max(hi, d)
		}
	}
	if len(seen) < 700 || hi-lo < 2*time.Second {
		t.Errorf("800 delays: %d distinct, range %v..%v; want them spread over %v", len(seen), lo, hi, tt)
	}
	same := 0
	for i := 0; i < 100; i++ {
		if tt.Delay(7, i, 0) == tt.Delay(8, i, 0) {
			same++
		}
	}
	if same > 5 {
		t.Errorf("%d of 100 delays equal across seeds 7 and 8", same)
	}
	if d := (ToolTime{Min: 2 * time.Second, Max: 2 * time.Second}).Delay(1, 3, 1); d != 2*time.Second {
		t.Errorf("fixed tool time: Delay = %v", d)
	}
	if d := (ToolTime{}).Delay(1, 3, 1); d != 0 || !(ToolTime{}).IsZero() {
		t.Errorf("zero tool time: Delay = %v", d)
	}
}

// arrivals records when each (task, round) request reached the server.
type arrivals struct {
	mu sync.Mutex
	at map[[2]int]time.Time
}

func (a *arrivals) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(body, &req)
		task, round := -1, 0
		for _, m := range req.Messages {
			switch {
			case m.Role == "assistant":
				round++
			case m.Role == "user" && m.Content != nil:
				fmt.Sscanf(*m.Content, "Task %d", &task)
			}
		}
		a.mu.Lock()
		a.at[[2]int{task, round}] = now
		a.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// TestHarnessWaitsToolTime: a session sends round r+1 no sooner than its
// round r tool time after sending round r (a lower bound: the wait can only
// be longer on a busy machine), and records the tool time in run.start.
func TestHarnessWaitsToolTime(t *testing.T) {
	tt := ToolTime{Min: 20 * time.Millisecond, Max: 80 * time.Millisecond}
	a := &arrivals{at: map[[2]int]time.Time{}}
	var start *hook.RunStart
	res := runFake(t, a.wrap(fakeChat(t, plain)), HarnessOptions{Sessions: 6, Rounds: 3, Model: "m", Seed: 5, ToolTime: tt,
		Publisher: hook.PublishFunc(func(ev hook.Event) {
			if rs, ok := ev.Body.(*hook.RunStart); ok {
				start = rs
			}
		})})
	if res.Outcomes.Corrupted() != 0 || res.ToolTime != "20ms-80ms" {
		t.Fatalf("outcomes %+v, tool time %q", res.Outcomes, res.ToolTime)
	}
	if start == nil || start.Config.ToolTime != "20ms-80ms" {
		t.Fatalf("run.start %+v: want tool_time 20ms-80ms (ab lists a differing tool time as a confound)", start)
	}
	checked := 0
	for i, s := range res.PerSession {
		for r := 0; r+1 < s.Rounds; r++ {
			a.mu.Lock()
			t0, ok0 := a.at[[2]int{i, r}]
			t1, ok1 := a.at[[2]int{i, r + 1}]
			a.mu.Unlock()
			if !ok0 || !ok1 {
				t.Fatalf("session %d: rounds %d and %d not both seen", i, r, r+1)
			}
			if want := tt.Delay(5, i, r); t1.Sub(t0) < want {
				t.Errorf("session %d round %d: next request after %v, want at least the tool time %v", i, r, t1.Sub(t0), want)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no session had two rounds")
	}
}

// TestHarnessCancelDuringToolTime: Ctrl-C while sessions run their tools
// ends the run at once; the sessions it cut short are aborted, not errors.
func TestHarnessCancelDuringToolTime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	h := fakeChat(t, plain)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		once.Do(func() { time.AfterFunc(50*time.Millisecond, cancel) })
	}))
	defer hs.Close()
	type result struct {
		res *HarnessResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := RunHarness(ctx, HarnessOptions{URL: hs.URL, Sessions: 4, Rounds: 3, Model: "m", ToolTime: ToolTime{Min: time.Hour, Max: time.Hour}})
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		// Cut short by the stop, the sessions have no outcome: none is
		// counted (as error or anything else), listed or published.
		if r.err == nil || r.res == nil || r.res.Aborted != 4 || r.res.Outcomes.Total() != 0 || len(r.res.PerSession) != 0 {
			t.Fatalf("err %v, res %+v", r.err, r.res)
		}
	case <-time.After(time.Minute):
		t.Fatal("a cancelled run kept waiting out an hour of tool time")
	}
}

func TestHarnessRejectsBadToolTime(t *testing.T) {
	_, err := RunHarness(context.Background(), HarnessOptions{URL: "http://h", ToolTime: ToolTime{Min: 2 * time.Second, Max: time.Second}})
	if err == nil || !strings.Contains(err.Error(), "tool time") {
		t.Fatalf("err %v, want one naming the tool time", err)
	}
}

// repro's default tool time is sim run's think time on the twin's clock:
// both record the same tool_time, so an A/B between a sim run bundle and a
// repro run against sim serve shows no tool-time confound.
func TestDefaultToolTimeIsSimRunsThinkTime(t *testing.T) {
	if got, want := sim.DefaultWorkload().ToolTime(), DefaultToolTime.String(); got != want {
		t.Fatalf("sim run's think time is %s, repro's default tool time %s", got, want)
	}
}
