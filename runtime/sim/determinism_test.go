package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"runtime"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// digestRun runs a small workload with every instrument on and returns the
// outcomes and a digest of the event stream (run.end's wall time zeroed:
// it is the one real-clock field).
func digestRun(t *testing.T, procs int) (map[string]int, string, int) {
	t.Helper()
	old := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(old)
	cfg := DefaultConfig()
	cfg.Seed = 7
	cfg.Instruments.GraphDiffEvery = 1
	w := testWorkload()
	w.Sessions, w.Rounds = 16, 2
	if small() {
		w.Sessions, w.Rounds = 4, 1
	}
	h := sha256.New()
	n := 0
	pub := hook.PublishFunc(func(ev hook.Event) {
		if re, ok := ev.Body.(*hook.RunEnd); ok {
			c := *re
			c.WallNS = 0
			ev.Body = &c
		}
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		n++
	})
	res, err := Run(context.Background(), cfg, w, pub)
	if err != nil {
		t.Fatal(err)
	}
	return res.Outcomes, hex.EncodeToString(h.Sum(nil)), n
}

func TestDeterministicAcrossGOMAXPROCS(t *testing.T) {
	o1, d1, n1 := digestRun(t, 1)
	o2, d2, n2 := digestRun(t, 2)
	if d1 != d2 || n1 != n2 {
		t.Fatalf("event streams differ: GOMAXPROCS=1 %d events %s, GOMAXPROCS=2 %d events %s", n1, d1, n2, d2)
	}
	for k, v := range o1 {
		if o2[k] != v {
			t.Fatalf("outcomes differ: %v vs %v", o1, o2)
		}
	}
	if n1 < 100 {
		t.Fatalf("only %d events: instruments silent?", n1)
	}
}

func TestSeedChangesInterleaving(t *testing.T) {
	a := NewScript(1, 0, 4)
	b := NewScript(2, 0, 4)
	if len(a.Prefix) == len(b.Prefix) && a.Rounds[0].Calls[0].Arguments == b.Rounds[0].Calls[0].Arguments {
		t.Fatal("different seeds produced the same script")
	}
	if len(a.Prefix) < 1000 || len(a.Prefix) > 2400 {
		t.Fatalf("first prompt prefix is %d tokens, want 1–2k", len(a.Prefix))
	}
}

func TestServeConcurrentSubmit(t *testing.T) {
	cfg := quietConfig(5)
	e, err := NewEngine(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx) }()
	results := make(chan Completion, 6)
	for i := range 6 {
		go func() {
			s := NewScript(5, i, 2)
			p, hint := BuildPrompt(s.Prefix, nil, s.Rounds[0].Expected)
			h, err := e.Submit(Request{ID: s.Session, Session: s.Session, Prompt: p, Hint: hint, Expected: s.Rounds[0].Expected})
			if err != nil {
				t.Error(err)
				return
			}
			results <- h.Result()
		}()
	}
	for range 6 {
		c := <-results
		if c.FinishReason == "" || len(c.Tokens) == 0 {
			t.Errorf("%s: empty completion %+v", c.ID, c)
		}
		if c.Text != DefaultVocab().Decode(c.Tokens) {
			t.Errorf("%s: text does not decode the tokens", c.ID)
		}
	}
	cancel()
	if err := <-served; err != context.Canceled {
		t.Fatalf("Serve returned %v", err)
	}
}

// TestRunCancelledEarly: a cancelled context stops Run before it builds the
// workload's scripts, however many sessions it was asked for.
func TestRunCancelledEarly(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := testWorkload()
	w.Sessions = 1 << 20
	res, err := Run(ctx, DefaultConfig(), w, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if res.Stats.Steps != 0 {
		t.Fatalf("ran %d steps after cancellation", res.Stats.Steps)
	}
}
