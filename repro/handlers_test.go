package repro

import (
	"io"
	"net/http"
	"testing"
)

// reply answers every request with body as contentType (""
// sets no header, so net/http sniffs one).
func reply(contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		io.WriteString(w, body)
	}
}

// stall reads the request's body (a server notices a client that gave up
// only after it), runs first (if any) and flushes what it wrote, then holds
// the request until the client goes away or t's cleanup.
func stall(t testing.TB, first http.HandlerFunc) http.HandlerFunc {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if first != nil {
			first(w, r)
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
}
