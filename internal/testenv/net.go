package testenv

import (
	"net"
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
