package repro

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// dying serves chat like fakeChat until it has answered after requests,
// then dies as a killed server does: its listener closes (new connections
// are refused) and every request on a connection still open is cut without
// an answer — or, with how, is cut mid-stream or answered by a gateway.
type dying struct {
	t     *testing.T
	after int64
	chat  http.Handler
	hs    *httptest.Server
	n     atomic.Int64
	once  sync.Once
	dead  atomic.Bool
	// modelsAlive keeps GET /v1/models answering after the death: a server
	// that resets chat connections but is up.
	modelsAlive bool
	// how the death shows: "" (connections refused or cut), "stream" (the
	// request that finds it dead gets half an SSE event, then the cut),
	// "gateway" (a proxy in front answers 502 to everything, models too).
	how string
}

func (d *dying) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.modelsAlive && strings.HasSuffix(r.URL.Path, "/models") {
		w.Write([]byte(`{"data":[{"id":"m"}]}`))
		return
	}
	if d.dead.Load() || d.n.Add(1) > d.after {
		if d.how == "gateway" {
			d.dead.Store(true)
			http.Error(w, "upstream connect error", http.StatusBadGateway)
			return
		}
		if !d.modelsAlive {
			d.dead.Store(true)
			d.once.Do(func() { d.hs.Listener.Close() })
		}
		if d.how == "stream" && r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assis")
			w.(http.Flusher).Flush()
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			d.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	}
	d.chat.ServeHTTP(w, r)
}

func startDying(t *testing.T, after int64, modelsAlive bool, how string) *dying {
	d := &dying{t: t, after: after, chat: fakeChat(t, plain), modelsAlive: modelsAlive, how: how}
	d.hs = httptest.NewServer(d)
	t.Cleanup(d.hs.Close)
	return d
}

// countSessions is a Publisher that counts the session events it sees.
type countSessions struct {
	mu sync.Mutex
	n  int
}

func (c *countSessions) Publish(ev hook.Event) {
	if ev.Kind == hook.KindSession {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

// TestHarnessServerLost: a server that dies mid-run stops the run with
// ErrServerLost; the sessions that failed with it and the rest are Aborted
// (not counted, not published) instead of counted as error outcomes, which
// read as corruption (a killed twin read 31/40 = 78% "corrupted", 19 of
// them errors from the dead server). A server dead from the start counts
// nothing.
func TestHarnessServerLost(t *testing.T) {
	for _, tc := range []struct {
		name   string
		after  int64 // chat requests answered before the death
		how    string
		stream bool
		probe  string // what the probe's failure says
	}{
		{"mid-run", 6, "", false, "GET /v1/models got no answer"},
		{"dead from the start", 0, "", false, "GET /v1/models got no answer"},
		// A server killed mid-stream cuts the streams it is sending: no
		// transport error, a cut stream (which once counted as corruption).
		{"mid-stream", 6, "stream", true, "GET /v1/models got no answer"},
		// Behind a proxy a dead server is a 502 from the proxy, to the
		// sessions and to the probe alike.
		{"behind a gateway", 6, "gateway", false, "answered HTTP 502"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startDying(t, tc.after, false, tc.how)
			pub := &countSessions{}
			res, err := RunHarness(context.Background(), HarnessOptions{URL: d.hs.URL, Sessions: 12, Rounds: 3, Concurrency: 4, Model: "m",
				Stream: tc.stream, Publisher: pub})
			if !errors.Is(err, ErrServerLost) {
				t.Fatalf("err %v, want ErrServerLost", err)
			}
			if !strings.Contains(res.ServerLost, tc.probe) {
				t.Errorf("ServerLost %q", res.ServerLost)
			}
			if res.Outcomes.Error != 0 {
				t.Errorf("%d sessions counted as errors of a dead server: %+v", res.Outcomes.Error, res.PerSession)
			}
			if n := res.Sessions + res.Aborted; n != 12 {
				t.Errorf("%d counted + %d aborted = %d, want all 12 sessions accounted for", res.Sessions, res.Aborted, n)
			}
			if res.Aborted == 0 {
				t.Error("no session was cut short by the death")
			}
			if pub.n != res.Sessions || len(res.PerSession) != res.Sessions {
				t.Errorf("published %d session events and listed %d for %d counted sessions", pub.n, len(res.PerSession), res.Sessions)
			}
			if tc.after == 0 && res.Sessions != 0 {
				t.Errorf("a server dead from the start: %d sessions counted", res.Sessions)
			}
		})
	}
}

// TestHarnessResetOnLiveServer: a chat connection cut while the server
// still answers GET /v1/models is the session's own failure: an error
// outcome, as before, and the run goes on.
func TestHarnessResetOnLiveServer(t *testing.T) {
	d := startDying(t, 0, true, "")
	res, err := RunHarness(context.Background(), HarnessOptions{URL: d.hs.URL, Sessions: 3, Rounds: 2, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ServerLost != "" || res.Aborted != 0 || res.Outcomes.Error != 3 || !outcome.IsCorrupted(res.PerSession[0].Outcome) ||
		!strings.HasPrefix(res.PerSession[0].Reason, "transport: ") {
		t.Errorf("lost %q, aborted %d, outcomes %+v, first %+v", res.ServerLost, res.Aborted, res.Outcomes, res.PerSession[0])
	}
}

// TestClientSideFailureIsNotALostServer: a probe that fails because this
// process is out of file descriptors or ports says nothing about the
// server (a run with more sessions than `ulimit -n` once read SERVER LOST).
func TestClientSideFailureIsNotALostServer(t *testing.T) {
	for _, err := range []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)},
		fmt.Errorf("get: %w", syscall.EADDRNOTAVAIL),
	} {
		if !clientSide(err) {
			t.Errorf("%v: not seen as this side's failure", err)
		}
	}
	if clientSide(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}) {
		t.Error("a refused connection is the server's side")
	}
}
