package server_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/runtime/sim/server"
	"github.com/kvcanary/kvcanary/runtime/sim/server/servertest"
)

const guardBody = `{"model":"m","messages":[{"role":"user","content":"hello; tool rounds: 1"}],"tools":` + servertest.ToolsJSON + `}`

func do(t *testing.T, hs *httptest.Server, host, origin, ctype string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/v1/chat/completions", strings.NewReader(guardBody))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	req.Header.Set("Content-Type", ctype)
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 19 item 11: a web page must not post sessions into a running
// experiment (DNS rebinding: a foreign Host; CSRF: a cross-origin simple
// POST with text/plain).
func TestHostOriginContentTypeChecks(t *testing.T) {
	hs := startQuiet(t, server.Options{AllowedHosts: []string{"gpu-7.lab"}}).HTTP
	tests := []struct {
		name, host, origin, ctype string
		status                    int
		want                      string
	}{
		{"loopback ip", "", "", "application/json", 200, ""},
		{"localhost", "localhost:30000", "", "application/json; charset=utf-8", 200, ""},
		{"ipv6 loopback", "[::1]:30000", "", "application/json", 200, ""},
		{"configured host", "GPU-7.lab:30000", "", "application/json", 200, ""},
		{"rebinding host", "attacker.example:30000", "", "application/json", 403, "host_not_allowed"},
		{"cross-origin page", "", "http://attacker.example", "application/json", 403, "cross_origin"},
		{"null origin", "", "null", "application/json", 403, "cross_origin"},
		{"local page origin", "", "http://localhost:8080", "application/json", 200, ""},
		{"text/plain (CORS simple request)", "", "", "text/plain", 415, "unsupported_media_type"},
		{"form post", "", "", "application/x-www-form-urlencoded", 415, "unsupported_media_type"},
		{"no content type", "", "", "", 415, "unsupported_media_type"},
	}
	for _, tc := range tests {
		status, body := do(t, hs, tc.host, tc.origin, tc.ctype)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want %d %q", tc.name, status, body, tc.status, tc.want)
		}
	}
	// GET routes check the Host too (a rebinding page could read them).
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/debug/kvcanary/requests", nil)
	req.Host = "attacker.example"
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("GET with a foreign Host: %d, want 403", resp.StatusCode)
	}
}

// Issue 19 item 11: a partly sent body is timed out (408) and the
// connection closed, rather than held with its buffer forever.
func TestPartialBodyTimesOut(t *testing.T) {
	hs := startQuiet(t, server.Options{BodyTimeout: 200 * time.Millisecond}).HTTP
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second)) // generous: the test fails rather than hangs
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
	if _, err := io.WriteString(conn, head+`{"model":"m","mess`); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "not received within 200ms") {
		t.Fatalf("stalled body: %d %s", resp.StatusCode, b)
	}
}
