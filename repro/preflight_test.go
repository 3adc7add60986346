package repro

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// modelsAnd serves a model list and answers chat requests with chat.
func modelsAnd(models string, chat http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, models)
			return
		}
		chat(w, r)
	}
}

func answer(msg, finish string) http.HandlerFunc {
	return reply("application/json", `{"id":"p","choices":[{"index":0,"message":`+msg+`,"finish_reason":"`+finish+`"}]}`)
}

const goodCall = `{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Oslo\"}"}}]}`

func TestPreflightCauses(t *testing.T) {
	list := `{"data":[{"id":"m1"},{"id":"m2"}]}`
	for _, tc := range []struct {
		name  string
		h     http.HandlerFunc
		opts  HarnessOptions
		cause string
		want  string
	}{
		{"models 500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) }, HarnessOptions{}, CauseNotOpenAI, "HTTP 500"},
		{"models html", reply("text/html", "<html>login</html>"), HarnessOptions{}, CauseNotOpenAI, "no OpenAI model list"},
		{"no models", modelsAnd(`{"data":[]}`, answer(goodCall, "tool_calls")), HarnessOptions{}, CauseModelMissing, "lists no models"},
		{"403 probe", modelsAnd(list, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }), HarnessOptions{}, CauseAuth, "HTTP 403"},
		{"probe 404 model", modelsAnd(list, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"message":"The model m1 does not exist."}}`)
		}), HarnessOptions{}, CauseModelMissing, "does not exist"},
		{"probe 500", modelsAnd(list, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "oom", 500) }), HarnessOptions{}, CauseServerError, "HTTP 500"},
		{"probe timeout", modelsAnd(list, stall(t, nil)), HarnessOptions{Timeout: 2 * time.Second}, CauseTimeout, "timed out"}, // the models list shares the bound: room for a loaded box
		{"bad arguments", modelsAnd(list, answer(`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"[1]"}}]}`, "tool_calls")),
			HarnessOptions{}, CauseBadToolCall, "not a JSON object"},
		{"truncated", modelsAnd(list, answer(`{"role":"assistant","content":"Let me think about Paris"}`, "length")), HarnessOptions{MaxTokens: 16}, CauseTruncated, "max_tokens"},
		{"reasoning leak", modelsAnd(list, answer(`{"role":"assistant","content":"","reasoning_content":"<function_calls>get_weather"}`, "stop")), HarnessOptions{}, CauseNoToolParser, "reasoning_content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(tc.h)
			defer hs.Close()
			tc.opts.URL = hs.URL
			_, err := Preflight(context.Background(), tc.opts)
			var pe *PreflightError
			if !errors.As(err, &pe) || pe.Cause != tc.cause || !strings.Contains(pe.Error(), tc.want) || pe.Hint == "" {
				t.Fatalf("err %v, want cause %s mentioning %q", err, tc.cause, tc.want)
			}
		})
	}
}

// TestPreflightPasses: a structured call passes (JSON and stream); the first
// listed model is taken; one leaking probe among structured ones is a note,
// not a failure (the server parses calls: the leak may be the corruption).
func TestPreflightPasses(t *testing.T) {
	for _, stream := range []bool{false, true} {
		hs := httptest.NewServer(modelsAnd(`{"data":[{"id":"m1"}]}`, fakeChat(t, plain)))
		res, err := Preflight(context.Background(), HarnessOptions{URL: hs.URL, Stream: stream})
		hs.Close()
		if err != nil || res.Model != "m1" || res.ProbeTool != "get_weather" || res.ProbeRequest == "" {
			t.Fatalf("stream=%v: %+v %v", stream, res, err)
		}
	}
	var n atomic.Int64
	hs := httptest.NewServer(modelsAnd(`{"data":[{"id":"m1"},{"id":"m2"}]}`, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			answer(`{"role":"assistant","content":"<tool_call>{}"}`, "stop")(w, r)
			return
		}
		answer(goodCall, "tool_calls")(w, r)
	}))
	defer hs.Close()
	res, err := Preflight(context.Background(), HarnessOptions{URL: hs.URL})
	if err != nil || res.Model != "m1" || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "1 of 4 preflight probes failed (no_tool_parser)") {
		t.Fatalf("%+v %v", res, err)
	}
	// A named model that is listed passes; models 404 with a named model
	// goes on to the probe.
	if res, err := Preflight(context.Background(), HarnessOptions{URL: hs.URL, Model: "m2"}); err != nil || res.Model != "m2" {
		t.Errorf("listed model: %+v %v", res, err)
	}
	no404 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			http.NotFound(w, r)
			return
		}
		io.Copy(io.Discard, r.Body)
		answer(goodCall, "tool_calls")(w, r)
	}))
	defer no404.Close()
	if res, err := Preflight(context.Background(), HarnessOptions{URL: no404.URL, Model: "x"}); err != nil || len(res.Notes) != 1 {
		t.Errorf("models 404 with --model: %+v %v", res, err)
	}
	if _, err := Preflight(context.Background(), HarnessOptions{URL: no404.URL}); err == nil {
		t.Error("models 404 without a model passed")
	}
}

func TestLooksLikeJSONCall(t *testing.T) {
	for s, want := range map[string]bool{
		`{"name": "f", "arguments": {}}`:                     true,
		"```json\n[{\"name\":\"f\",\"parameters\":{}}]\n```": true,
		`The "name" of the "arguments" is...`:                false,
		`{"answer": 42}`:                                     false,
	} {
		if looksLikeJSONCall(s) != want {
			t.Errorf("%q: want %v", s, want)
		}
	}
}
