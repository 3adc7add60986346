package repro

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// throttling answers 429 (Retry-After: 0) to chat requests while refuse
// says so, and serves fakeChat otherwise.
func throttling(t *testing.T, refuse func(n int64) bool) http.Handler {
	chat := fakeChat(t, plain)
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/chat/completions") && refuse(n.Add(1)) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"Too many requests"}}`, http.StatusTooManyRequests)
			return
		}
		chat.ServeHTTP(w, r)
	})
}

// TestHarnessRetriesThrottledRequests: a 429 is no answer, so the request
// is sent again; a proxy that throttles every other request (which once
// made 45% of sessions read as corrupted against 5% without it) leaves the
// outcomes whole.
func TestHarnessRetriesThrottledRequests(t *testing.T) {
	res := runFake(t, throttling(t, func(n int64) bool { return n%2 == 1 }), HarnessOptions{Sessions: 6, Rounds: 3, Concurrency: 2, Model: "m"})
	if res.Outcomes.Error != 0 || res.Throttled != 0 || res.Sessions != 6 || res.Outcomes.Corrupted() != 0 {
		t.Errorf("outcomes %+v, throttled %d: %+v", res.Outcomes, res.Throttled, res.PerSession)
	}
}

// TestHarnessDoesNotCountThrottledSessions: a server that never lets a
// request through gives no outcome: the sessions are Throttled, not errors
// (corruption), and the server is not lost.
func TestHarnessDoesNotCountThrottledSessions(t *testing.T) {
	pub := &countSessions{}
	opts := HarnessOptions{Sessions: 3, Rounds: 2, Concurrency: 3, Model: "m", Publisher: pub}
	res := runFake(t, throttling(t, func(int64) bool { return true }), opts)
	if res.Throttled != 3 || res.Sessions != 0 || res.Outcomes.Error != 0 || res.ServerLost != "" || pub.n != 0 {
		t.Errorf("throttled %d, counted %d, outcomes %+v, lost %q, published %d", res.Throttled, res.Sessions, res.Outcomes, res.ServerLost, pub.n)
	}
}

// TestHarnessStreamWithoutDoneAfterFinish: a stream whose choice ended
// with a finish_reason is whole even when [DONE] never comes (a proxy that
// strips it once made every session read as an error); one cut before its
// finish_reason is still an error (TestHarnessBadServers).
func TestHarnessStreamWithoutDoneAfterFinish(t *testing.T) {
	h := reply("text/event-stream", "data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"All done.\"}}]}\n\n"+
		"data: {\"id\":\"x\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	res := runFake(t, h, HarnessOptions{Sessions: 2, Rounds: 1, Model: "m", Stream: true})
	if res.Outcomes.Error != 0 || res.Sessions != 2 || res.FinishReasons["stop"] != 2 {
		t.Errorf("outcomes %+v, finish reasons %v: %+v", res.Outcomes, res.FinishReasons, res.PerSession)
	}
}
