package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
)

// One clock: the twin server stamps its events and its log lines with the
// clock its clients use (the wall clock), never the simulated 2026-01-01
// origin, so a bundle mixing both spans real time.
func TestServerEventsUseOneClock(t *testing.T) {
	// A fixed clock stands in for the wall clock (injected, not slept on).
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.Local)
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{Sched: true, Replay: true}
	cfg.MultiStreamOverlap = false
	cfg.DecodeLogInterval = 1 // a line per step: the reply (one get_weather call) may take fewer than 40
	// Only the engine loop writes the log: it is read after Stop ended the loop.
	var log bytes.Buffer
	cfg.Log = &log
	var mu sync.Mutex
	var ts []int64
	pub := hook.PublishFunc(func(ev hook.Event) {
		mu.Lock()
		ts = append(ts, ev.TS)
		mu.Unlock()
	})
	tw := servertest.Start(t, server.Options{Config: cfg, Publisher: pub, Now: func() time.Time { return at }})
	resp, _ := servertest.Post(t, tw.URL, `{"model":"m","messages":[{"role":"user","content":"Task 1. tool rounds: 1. Weather in Oslo?"}],"tools":`+servertest.ToolsJSON+`}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	tw.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(ts) == 0 {
		t.Fatal("no events published")
	}
	for _, x := range ts {
		if x != at.UnixNano() {
			t.Fatalf("event at %v, want the server's clock %v", time.Unix(0, x), at)
		}
	}
	if want := "[" + at.Format("2006-01-02 15:04:05") + " TP0]"; !strings.Contains(log.String(), want) {
		t.Errorf("log lines lack the wall-clock stamp %q:\n%.300s", want, log.String())
	}
}

// The twin serves its real settings like SGLang's GET /get_server_info.
func TestServerInfo(t *testing.T) {
	cfg := servertest.Config()
	cfg.DisableCUDAGraph, cfg.CUDAGraphMaxBS, cfg.Inject = true, 48, []string{sim.FaultTransferRace}
	hs := servertest.Start(t, server.Options{Config: cfg}).HTTP
	for _, path := range []string{"/get_server_info", "/server_info"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		if m["disable_cuda_graph"] != true || m["cuda_graph_max_bs"] != 48.0 || m["multi_stream_overlap"] != cfg.MultiStreamOverlap ||
			m["index_k_dtype"] != cfg.IndexKDtype || m["kvcanary_inject"] != sim.FaultTransferRace || m["max_total_num_tokens"] != float64(cfg.PoolTokens) {
			t.Errorf("%s: %s", path, body)
		}
	}
	resp, err := http.Post(hs.URL+"/get_server_info", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /get_server_info: %d", resp.StatusCode)
	}
}
