package servertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/runtime/sim/server"
)

// ToolsJSON is a request's "tools" offering one function, get_weather(location).
const ToolsJSON = `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}}}}}]`

// Config returns sim.DefaultConfig with every instrument off.
func Config() sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Instruments = sim.Instruments{}
	return cfg
}

// Twin is a twin server whose engine loop runs behind a loopback HTTP server.
type Twin struct {
	Server *server.Server
	HTTP   *httptest.Server
	URL    string // HTTP.URL

	cancel   context.CancelFunc
	loopDone chan struct{}
}

// Start builds a server from opts, runs its loop and serves it over HTTP.
// Stop runs when the test ends; a failure to build the server fails the test.
func Start(t testing.TB, opts server.Options) *Twin {
	t.Helper()
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tw := &Twin{Server: srv, cancel: cancel, loopDone: make(chan struct{})}
	go func() {
		defer close(tw.loopDone)
		srv.Run(ctx)
	}()
	tw.HTTP = httptest.NewServer(srv.Handler())
	tw.URL = tw.HTTP.URL
	t.Cleanup(tw.Stop)
	return tw
}

// Stop closes the HTTP server, ends the engine loop and waits for it, then
// closes the server (which publishes the judged sessions), so what the
// server counted or recorded is final afterwards. Every step is idempotent,
// so calling Stop again does nothing.
func (tw *Twin) Stop() {
	tw.HTTP.Close()
	tw.cancel()
	<-tw.loopDone
	tw.Server.Close()
}

// Post sends body to url's /v1/chat/completions and returns the response
// with its body read whole.
func Post(t testing.TB, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
