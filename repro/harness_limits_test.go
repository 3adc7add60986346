package repro

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// countingTransport counts the bytes read from each response body.
type countingTransport struct {
	mu     sync.Mutex
	counts []int64
}

type countedBody struct {
	io.ReadCloser
	t *countingTransport
	i int
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.t.mu.Lock()
	b.t.counts[b.i] += int64(n)
	b.t.mu.Unlock()
	return n, err
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.counts = append(t.counts, 0)
	i := len(t.counts) - 1
	t.mu.Unlock()
	resp.Body = &countedBody{resp.Body, t, i}
	return resp, nil
}

// garbage writes chunk to w until the client goes away.
func garbage(w http.ResponseWriter, r *http.Request, ctype string, chunk []byte) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", ctype)
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// Issue 19 item 10: against a server streaming garbage, each session reads
// at most MaxResponseBytes of a response and ends as error with the reason
// (before, a session could hold ~150 MB).
func TestHarnessResponseCap(t *testing.T) {
	const limit = 256 << 10
	arg := `data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"xxxxxxxx"}}]}}]}` + "\n\n"
	for _, tc := range []struct {
		name   string
		stream bool
		h      http.HandlerFunc
	}{
		{"json garbage", false, func(w http.ResponseWriter, r *http.Request) {
			garbage(w, r, "application/json", []byte(strings.Repeat(`{"choices":[`, 1000)))
		}},
		{"stream without newline", true, func(w http.ResponseWriter, r *http.Request) {
			garbage(w, r, "text/event-stream", []byte("data: "+strings.Repeat("z", 4000)))
		}},
		{"endless tool-call deltas", true, func(w http.ResponseWriter, r *http.Request) {
			garbage(w, r, "text/event-stream", []byte(strings.Repeat(arg, 50)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct := &countingTransport{}
			opts := HarnessOptions{Sessions: 4, Rounds: 2, Model: "m", Stream: tc.stream, MaxResponseBytes: limit,
				Client: &http.Client{Transport: ct}}
			res := runFake(t, tc.h, opts)
			for _, s := range res.PerSession {
				if s.Outcome != hook.OutcomeError || !strings.Contains(s.Reason, "larger than 262144 bytes") {
					t.Fatalf("session %s: %s %q, want error naming the cap", s.ID, s.Outcome, s.Reason)
				}
			}
			ct.mu.Lock()
			defer ct.mu.Unlock()
			if len(ct.counts) == 0 {
				t.Fatal("no responses counted")
			}
			for i, n := range ct.counts {
				if n > limit+64<<10 {
					t.Errorf("response %d: read %d bytes, cap %d", i, n, limit)
				}
			}
		})
	}
}

// TestCapReaderExactLimit: a body of exactly the limit is not over it; one
// byte more is.
func TestCapReaderExactLimit(t *testing.T) {
	for _, c := range []struct {
		body  string
		limit int64
		over  bool
	}{{"abcd", 4, false}, {"abcde", 4, true}, {"", 0, false}, {"a", 0, true}, {"ab", 8, false}} {
		got, err := io.ReadAll(&capReader{r: strings.NewReader(c.body), left: c.limit})
		if over := errors.Is(err, errResponseCap); over != c.over || (!c.over && (err != nil || string(got) != c.body)) {
			t.Errorf("%q with limit %d: read %q, err %v; want over=%v", c.body, c.limit, got, err, c.over)
		}
	}
}
