package testenv

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FreeAddr returns a loopback host:port that nothing listens on: a port the
// kernel just handed out, closed again. It serves a server that must bind a
// known address, and a dead URL ("http://" + FreeAddr(t)) whose dial is
// refused. Like any free-port probe it races with other processes taking
// the port; tests use it only where that would fail loudly.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on loopback: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ServeLoop serves h on a loopback httptest server for the life of t, with
// run (the server's main loop; its error is not looked at) going in the
// background until then. At cleanup the HTTP server closes first, then
// run's context is cancelled, then stop (when not nil) is called: the
// order a server that owns goroutines behind its handler needs.
func ServeLoop(t testing.TB, h http.Handler, run func(context.Context) error, stop func()) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	go run(ctx)
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		if stop != nil {
			stop()
		}
	})
	return hs
}
