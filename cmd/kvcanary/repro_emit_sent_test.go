package main

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// Issue 27 D6: repro --emit's run.end carries sent, and it is exactly the
// events the collector got before it, so a bundle of them is judged whole.
func TestReproEmitRunEndCarriesSent(t *testing.T) {
	srv := httptest.NewServer(leakFake())
	defer srv.Close()
	addr := "unix://" + filepath.Join(t.TempDir(), "c.sock")
	c, err := hook.Listen(addr, hook.ListenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var before uint64
	var end *hook.RunEnd
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	ended := make(chan struct{})
	go func() {
		served <- c.Serve(ctx, hook.PublishFunc(func(ev hook.Event) {
			mu.Lock()
			defer mu.Unlock()
			if b, ok := ev.Body.(*hook.RunEnd); ok && end == nil {
				end = b
				close(ended)
			} else if end == nil {
				before++
			}
		}))
	}()
	if _, _, err := runRepro(t, "--url", srv.URL, "--no-preflight", "--sessions", "2", "--rounds", "2", "--tool-time", "0", "--emit", addr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector never saw run.end")
	}
	cancel()
	<-served
	mu.Lock()
	defer mu.Unlock()
	if before == 0 || end.Sent != before {
		t.Fatalf("run.end sent %d, the collector got %d events before it", end.Sent, before)
	}
}
