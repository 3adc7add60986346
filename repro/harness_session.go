package repro

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// DefaultMaxResponseBytes bounds the bytes read of one response (JSON body
// or event stream) unless HarnessOptions says otherwise: far above any
// tool-calling round (a 32k-token answer is about 130 KB of JSON), and with
// the parse it costs at most about 3x this per session in flight.
const DefaultMaxResponseBytes = 4 << 20

// maxResponse bounds the readers' own buffers when called without a limit.
const maxResponse = DefaultMaxResponseBytes

// errResponseCap is returned by capReader past its limit.
var errResponseCap = errors.New("response over the size limit")

// capReader reads at most left bytes of r, then fails with errResponseCap
// when r has more: a body of exactly the limit reads whole.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			return 0, errResponseCap
		}
		return 0, err // io.EOF: the body ended at the limit
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

type driver struct {
	opts      *HarnessOptions
	endpoint  string
	tools     []byte
	preflight bool // requests carry openaiwire.ProbeHeader
}

// harnessTools is the tool catalogue every round offers.
var harnessTools = []struct {
	name, desc string
	params     [][2]string // name, JSON type
}{
	{"get_weather", "Current weather and forecast for a place", [][2]string{{"location", "string"}, {"unit", "string"}, {"days_ahead", "integer"}}},
	{"search_web", "Search the web", [][2]string{{"query", "string"}, {"max_results", "integer"}}},
	{"read_file", "Read part of a file", [][2]string{{"path", "string"}, {"offset", "integer"}, {"limit", "integer"}}},
	{"list_files", "List files in a directory", [][2]string{{"path", "string"}, {"recursive", "boolean"}, {"pattern", "string"}}},
	{"run_command", "Run a shell command", [][2]string{{"command", "string"}, {"timeout_seconds", "integer"}}},
	{"get_stock_price", "Latest price of a stock", [][2]string{{"symbol", "string"}, {"currency", "string"}}},
	{"send_email", "Send an email", [][2]string{{"to_address", "string"}, {"subject", "string"}, {"body", "string"}}},
	{"query_database", "Run a read-only SQL query", [][2]string{{"sql", "string"}, {"limit", "integer"}}},
}

func toolsJSON() []byte {
	type prop struct {
		Type string `json:"type"`
	}
	type fn struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Parameters  struct {
			Type       string          `json:"type"`
			Properties map[string]prop `json:"properties"`
			Required   []string        `json:"required"`
		} `json:"parameters"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var ts []tool
	for _, t := range harnessTools {
		f := fn{Name: t.name, Description: t.desc}
		f.Parameters.Type = "object"
		f.Parameters.Properties = map[string]prop{}
		for _, p := range t.params {
			f.Parameters.Properties[p[0]] = prop{p[1]}
			f.Parameters.Required = append(f.Parameters.Required, p[0])
		}
		ts = append(ts, tool{"function", f})
	}
	b, _ := json.Marshal(ts)
	return b
}

var taskWords = strings.Fields(`weather forecast report summary invoice budget travel itinerary meeting
schedule database metrics latency outage deploy release notes customer order shipment inventory
quarterly revenue incident review backlog roadmap security audit migration cluster`)

// SessionTask is the first user message of session i of a run with seed:
// distinct per session, and stating its tool rounds ("tool rounds: N") so a
// model — or the twin — knows how many rounds must call a tool.
func SessionTask(seed uint64, i, toolRounds int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Task %d of run %d: prepare a short", i, seed)
	x := mix64(seed^0x7a5c, uint64(i))
	for k := 0; k < 5; k++ {
		b.WriteByte(' ')
		b.WriteString(taskWords[x%uint64(len(taskWords))])
		x = x/uint64(len(taskWords)) ^ mix64(x, uint64(k))
	}
	fmt.Fprintf(&b, ". Call exactly one tool per turn; tool rounds: %d. After the last tool result, answer in plain text.", toolRounds)
	return b.String()
}

// ToolResult is the harness's deterministic answer to a tool call.
func ToolResult(name, arguments string) string {
	x := mix64(uint64(len(arguments)), uint64(fnvString(name+"\x00"+arguments)))
	var b strings.Builder
	b.WriteString(`{"tool":`)
	b.WriteString(strconv.Quote(name))
	b.WriteString(`,"ok":true,"result":"`)
	for k := 0; k < 24; k++ {
		if k > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(taskWords[x%uint64(len(taskWords))])
		x = mix64(x, uint64(k))
	}
	b.WriteString(`"}`)
	return b.String()
}

func fnvString(s string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// response is one parsed answer.
type response struct {
	id    string
	round outcome.Round
	calls []openaiwire.ToolCall
}

// appendCalls writes calls as a message's tool_calls array, every call with
// its id, type and function (an empty id stays "": the tool message answers
// it by that id). No calls is null, as encoding/json writes a nil slice.
func appendCalls(m *bytes.Buffer, calls []openaiwire.ToolCall) {
	if calls == nil {
		m.WriteString("null")
		return
	}
	m.WriteByte('[')
	for i, c := range calls {
		if i > 0 {
			m.WriteByte(',')
		}
		m.WriteString(`{"id":`)
		m.Write(quoteJSON(c.ID))
		m.WriteString(`,"type":`)
		m.Write(quoteJSON(c.Type))
		m.WriteString(`,"function":{"name":`)
		m.Write(quoteJSON(c.Function.Name))
		m.WriteString(`,"arguments":`)
		m.Write(quoteJSON(c.Function.Arguments))
		m.WriteString(`}}`)
	}
	m.WriteByte(']')
}

func quoteJSON(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}

func (d *driver) session(ctx context.Context, i int) SessionResult {
	o := d.opts
	var sr SessionResult
	var msgs [][]byte
	tools, rounds := d.tools, o.Rounds
	var conv *Conversation
	if len(o.Conversations) > 0 {
		conv = &o.Conversations[i%len(o.Conversations)]
		sr.ID = conv.ID
		if len(o.Conversations) < o.Sessions {
			sr.ID = fmt.Sprintf("%s/%d", conv.ID, i/len(o.Conversations))
		}
		sr.ToolRounds = conv.ToolRounds
		msgs = append(msgs, conv.messages...)
		if conv.tools != nil {
			tools = conv.tools
		}
		if conv.Rounds > 0 {
			rounds = conv.Rounds
		}
		rounds = max(rounds, sr.ToolRounds)
	} else {
		sr = SessionResult{ID: fmt.Sprintf("s%03d", i), ToolRounds: ToolRoundsFor(o.Seed, i, o.Rounds)}
		msgs = [][]byte{
			[]byte(`{"role":"system","content":"You are a careful assistant. Use the provided tools; when you have what you need, answer in plain text."}`),
			append(append([]byte(`{"role":"user","content":`), quoteJSON(SessionTask(o.Seed, i, sr.ToolRounds))...), '}'),
		}
	}
	for round := 0; round < rounds; round++ {
		if ctx.Err() != nil {
			sr.Outcome, sr.Reason = hook.OutcomeError, "aborted: "+ctx.Err().Error()
			return sr
		}
		resp, err := d.do(ctx, msgs, tools)
		if err != nil {
			sr.Outcome, sr.Reason, sr.Failure = hook.OutcomeError, err.Error(), failureOf(err)
			if errors.Is(err, errTimeout) {
				sr.Outcome = hook.OutcomeTimeout
			}
			return sr
		}
		sr.Rounds++
		sr.Requests = append(sr.Requests, resp.id)
		sr.FinishReasons = append(sr.FinishReasons, resp.round.FinishReason)
		if outcome.HasLoop(resp.round.Content, 4, 4) || outcome.HasLoop(resp.round.ReasoningContent, 4, 4) {
			sr.Loop = true
		}
		oc, reason := o.Classifier.Judge(round, sr.ToolRounds, resp.round)
		if oc == "" && conv != nil {
			oc, reason = conv.judgeCalls(round, resp.calls)
		}
		if oc != "" {
			sr.Outcome, sr.Reason = string(oc), reason
			if outcome.IsCorrupted(oc) {
				sr.Output = Excerpt(resp.round.Content + resp.round.ReasoningContent)
			}
			return sr
		}
		// Echo the assistant turn and answer every call.
		var m bytes.Buffer
		m.WriteString(`{"role":"assistant","content":`)
		if resp.round.Content == "" {
			m.WriteString("null")
		} else {
			m.Write(quoteJSON(resp.round.Content))
		}
		m.WriteString(`,"tool_calls":`)
		appendCalls(&m, resp.calls)
		m.WriteByte('}')
		msgs = append(msgs, m.Bytes())
		for _, c := range resp.calls {
			var t bytes.Buffer
			t.WriteString(`{"role":"tool","tool_call_id":`)
			t.Write(quoteJSON(c.ID))
			t.WriteString(`,"content":`)
			t.Write(quoteJSON(ToolResult(c.Function.Name, c.Function.Arguments)))
			t.WriteByte('}')
			msgs = append(msgs, t.Bytes())
		}
		if round+1 < rounds {
			// The tools run before their results go back.
			if err := sleepCtx(ctx, o.ToolTime.Delay(o.Seed, i, round)); err != nil {
				sr.Outcome, sr.Reason = hook.OutcomeError, "aborted: "+err.Error()
				return sr
			}
		}
	}
	sr.Outcome = hook.OutcomeMaxRounds
	return sr
}

// sleepCtx waits d or until ctx ends, and returns ctx's error if it ended.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func (d *driver) body(msgs [][]byte, tools []byte) []byte {
	var b bytes.Buffer
	b.Grow(1024 + len(tools))
	b.WriteString(`{"model":`)
	b.Write(quoteJSON(d.opts.Model))
	b.WriteString(`,"messages":[`)
	for k, m := range msgs {
		if k > 0 {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteString(`],"tools":`)
	b.Write(tools)
	b.WriteString(`,"tool_choice":"auto"`)
	b.Write(d.opts.samplingJSON(nil))
	if d.opts.Stream {
		b.WriteString(`,"stream":true`)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// Throttling: a server or gateway that answers 429 Too Many Requests (or
// 503 with a Retry-After) has not answered the request. It is sent again
// after Retry-After (throttleWait when absent, at most maxThrottleWait),
// up to ThrottleRetries times; a request still throttled then ends the
// session with errThrottled, which the harness does not count: rate
// limiting once read as corruption (45% against 5% without the proxy).
const (
	ThrottleRetries = 5
	throttleWait    = time.Second
	maxThrottleWait = 30 * time.Second
)

// errThrottled marks a request the server kept refusing with 429.
var errThrottled = errors.New("throttled")

// do sends one request, again while the server throttles it, and parses
// the answer. Every failure is an error saying what went wrong; errTimeout
// marks the per-request timeout, errThrottled a request never let through.
func (d *driver) do(ctx context.Context, msgs [][]byte, tools []byte) (*response, error) {
	for try := 0; ; try++ {
		out, err := d.doOnce(ctx, msgs, tools)
		var se *statusError
		if !errors.As(err, &se) || se.retryAfter == 0 {
			return out, err
		}
		if try == ThrottleRetries {
			return nil, fmt.Errorf("%w: %v, %d times in a row (Retry-After honoured up to %v)", errThrottled, err, try+1, maxThrottleWait)
		}
		t := time.NewTimer(se.retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, d.transportError(ctx, ctx.Err())
		case <-t.C:
		}
	}
}

// retryAfter says how long a throttled answer asks the client to wait, and
// 0 for an answer that is not throttling.
func retryAfter(resp *http.Response) time.Duration {
	h := resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusTooManyRequests && (resp.StatusCode != http.StatusServiceUnavailable || h == "") {
		return 0
	}
	wait := throttleWait
	if s, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && s >= 0 {
		wait = time.Duration(s) * time.Second
	} else if at, err := http.ParseTime(h); err == nil {
		wait = time.Until(at)
	}
	return min(max(wait, 100*time.Millisecond), maxThrottleWait)
}

// doOnce sends one request and parses the answer.
func (d *driver) doOnce(ctx context.Context, msgs [][]byte, tools []byte) (*response, error) {
	rctx, cancel := context.WithTimeoutCause(ctx, d.opts.Timeout, errTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, d.endpoint, bytes.NewReader(d.body(msgs, tools)))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	d.opts.setHeaders(req)
	req.Header.Set("Content-Type", "application/json")
	if d.preflight {
		req.Header.Set(openaiwire.ProbeHeader, "preflight")
	}
	if d.opts.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := d.opts.Client.Do(req)
	if err != nil {
		return nil, d.transportError(rctx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, &statusError{Code: resp.StatusCode, Message: errorMessage(snippet), retryAfter: retryAfter(resp)}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "text/html" {
		return nil, fmt.Errorf("HTML response (Content-Type %s), not an OpenAI answer", ct)
	}
	var out *response
	limit := d.opts.MaxResponseBytes
	body := &capReader{r: resp.Body, left: int64(limit)}
	if d.opts.Stream && ct == "text/event-stream" {
		out, err = readStreamLimit(body, limit)
	} else {
		out, err = readJSONLimit(body, limit)
	}
	if errors.Is(err, errResponseCap) {
		return nil, fmt.Errorf("response larger than %d bytes (a server streaming garbage?); HarnessOptions.MaxResponseBytes raises the limit", limit)
	}
	if err != nil {
		if rctx.Err() != nil {
			// The body read failed because the request's time ran out.
			return nil, d.transportError(rctx, err)
		}
		return nil, err
	}
	return out, nil
}

func (d *driver) transportError(rctx context.Context, err error) error {
	if errors.Is(context.Cause(rctx), errTimeout) {
		return fmt.Errorf("%w after %v", errTimeout, d.opts.Timeout)
	}
	if rctx.Err() != nil {
		return fmt.Errorf("aborted: %w", rctx.Err())
	}
	return fmt.Errorf("%w: %w", errTransport, err)
}

// errTransport marks a request that got no answer.
var errTransport = errors.New("transport")

// failureOf classifies a request's error (Failure*); "" for a run cut short
// (the request was not the server's to answer).
func failureOf(err error) string {
	var se *statusError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errTimeout):
		return ""
	case errors.Is(err, errTimeout):
		return FailureTimeout
	case errors.As(err, &se) && se.Code >= 500:
		return FailureHTTP5xx
	case errors.As(err, &se) || errors.Is(err, errThrottled):
		return FailureHTTP4xx
	case errors.Is(err, errTransport):
		return FailureTransport
	}
	return FailureOther
}

// errorMessage extracts an OpenAI error message from a body, or returns the
// body's beginning.
func errorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return strconv.Quote(clip(string(body), 200))
}

func readJSON(r io.Reader) (*response, error) { return readJSONLimit(r, maxResponse) }

func readJSONLimit(r io.Reader, limit int) (*response, error) {
	body, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if len(body) > limit {
		return nil, fmt.Errorf("response larger than %d bytes", limit)
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '<' {
		return nil, fmt.Errorf("HTML or XML body, not JSON: %s", strconv.Quote(clip(string(t), 80)))
	}
	var w openaiwire.Response
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("invalid JSON response: %w", jsonOffset(body, err))
	}
	if len(w.Choices) == 0 {
		return nil, fmt.Errorf("response %s has no choices", strconv.Quote(w.ID))
	}
	c := w.Choices[0]
	out := &response{id: w.ID}
	if c.Message.Content != nil {
		out.round.Content = *c.Message.Content
	}
	if c.Message.ReasoningContent != nil {
		out.round.ReasoningContent = *c.Message.ReasoningContent
	}
	if c.FinishReason != nil {
		out.round.FinishReason = *c.FinishReason
	}
	out.setCalls(c.Message.ToolCalls)
	return out, nil
}

func jsonOffset(body []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("byte %d of %d: %w", se.Offset, len(body), err)
	}
	return err
}

// setCalls keeps well-formed calls and counts the rest.
func (r *response) setCalls(calls []openaiwire.ToolCall) {
	for _, c := range calls {
		args := strings.TrimSpace(c.Function.Arguments)
		if args == "" {
			args = "{}"
		}
		if c.Function.Name == "" || args[0] != '{' || !json.Valid([]byte(args)) {
			r.round.BadToolCalls++
			continue
		}
		if c.Type == "" {
			c.Type = "function"
		}
		c.Function.Arguments = args
		r.calls = append(r.calls, c)
	}
	r.round.ToolCalls = len(r.calls)
}

// readStream assembles a server-sent-events answer. It needs "data: [DONE]":
// a stream that ends before it was cut.
func readStream(r io.Reader) (*response, error) { return readStreamLimit(r, maxResponse) }

// readStreamLimit is readStream with limit bounding one event line and the
// assembled text (a server that never sends a newline cannot exhaust memory).
func readStreamLimit(r io.Reader, limit int) (*response, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	out := &response{}
	var content, reasoning strings.Builder
	var calls []openaiwire.ToolCall
	var names, args [][]byte // calls' pieces, joined at the end (+= would copy quadratically)
	events := 0
	whole := func() (*response, error) {
		out.round.Content, out.round.ReasoningContent = content.String(), reasoning.String()
		for i := range calls {
			calls[i].Function.Name, calls[i].Function.Arguments = string(names[i]), string(args[i])
		}
		out.setCalls(calls)
		return out, nil
	}
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long event line: gather it whole, up to limit.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(long) > limit {
					return nil, fmt.Errorf("stream event %d: line longer than %d bytes", events+1, limit)
				}
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if errors.Is(err, errResponseCap) {
			return nil, fmt.Errorf("stream event %d: %w", events+1, err)
		}
		if len(line) > 0 {
			t := bytes.TrimRight(line, "\r\n")
			if err != nil && !bytes.HasSuffix(line, []byte("\n")) {
				return nil, fmt.Errorf("stream cut mid-event after %d events", events)
			}
			if data, ok := bytes.CutPrefix(t, []byte("data:")); ok {
				data = bytes.TrimSpace(data)
				if string(data) == "[DONE]" {
					return whole()
				}
				events++
				var ch openaiwire.Chunk
				if jerr := json.Unmarshal(data, &ch); jerr != nil {
					return nil, fmt.Errorf("stream event %d: invalid JSON: %w", events, jsonOffset(data, jerr))
				}
				if ch.Error != nil {
					return nil, fmt.Errorf("stream event %d: server error: %s", events, strconv.Quote(ch.Error.Message))
				}
				if out.id == "" {
					out.id = ch.ID
				}
				for _, c := range ch.Choices {
					if c.Delta.Content != nil {
						content.WriteString(*c.Delta.Content)
					}
					if c.Delta.ReasoningContent != nil {
						reasoning.WriteString(*c.Delta.ReasoningContent)
					}
					for _, tc := range c.Delta.ToolCalls {
						idx := len(calls)
						if tc.Index != nil {
							idx = *tc.Index
						}
						if idx < 0 || idx > 1024 {
							return nil, fmt.Errorf("stream event %d: tool call index %d", events, idx)
						}
						for len(calls) <= idx {
							calls = append(calls, openaiwire.ToolCall{})
							names, args = append(names, nil), append(args, nil)
						}
						cl := &calls[idx]
						if tc.ID != "" {
							cl.ID = tc.ID
						}
						if tc.Type != "" {
							cl.Type = tc.Type
						}
						names[idx] = append(names[idx], tc.Function.Name...)
						args[idx] = append(args[idx], tc.Function.Arguments...)
					}
					if c.FinishReason != nil {
						out.round.FinishReason = *c.FinishReason
					}
				}
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && out.round.FinishReason != "" {
				// The choice said it finished; only the [DONE] sentinel is
				// missing (a proxy that strips it): the answer is whole.
				return whole()
			}
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("stream ended after %d events without [DONE] or a finish_reason", events)
			}
			return nil, fmt.Errorf("read stream after %d events: %w", events, err)
		}
		if content.Len()+reasoning.Len() > limit {
			return nil, fmt.Errorf("stream larger than %d bytes", limit)
		}
	}
}

// DiscoverModel asks the server at url (any form ChatEndpoint takes) for its
// models and returns the first id, or "default" when it cannot tell.
func DiscoverModel(ctx context.Context, c *http.Client, url string, timeout time.Duration) string {
	return discoverModel(ctx, c, url, timeout, nil)
}

// DiscoverModelWith is DiscoverModel sending opts' API key and headers.
func DiscoverModelWith(ctx context.Context, opts *HarnessOptions, timeout time.Duration) string {
	return discoverModel(ctx, opts.Client, opts.URL, timeout, opts)
}

func discoverModel(ctx context.Context, c *http.Client, url string, timeout time.Duration, opts *HarnessOptions) string {
	endpoint, err := ChatEndpoint(url)
	if err != nil {
		return "default"
	}
	if c == nil {
		c = http.DefaultClient
	}
	u := strings.TrimSuffix(endpoint, "/chat/completions") + "/models"
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return "default"
	}
	if opts != nil {
		opts.setHeaders(req)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "default"
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m) != nil || len(m.Data) == 0 || m.Data[0].ID == "" {
		return "default"
	}
	return m.Data[0].ID
}
