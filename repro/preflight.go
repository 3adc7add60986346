package repro

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Preflight causes: why a server cannot be measured (PreflightError.Cause).
const (
	CauseUnreachable  = "unreachable"    // connection refused, DNS, no answer in time
	CauseAuth         = "auth"           // 401/403: credentials missing or refused
	CauseNotOpenAI    = "not_openai"     // no OpenAI-style /v1/models or chat endpoint at the URL
	CauseModelMissing = "model_missing"  // the model is not among the server's models
	CauseNoToolParser = "no_tool_parser" // the tool call came back as text in content
	CauseIgnoresTools = "ignores_tools"  // a prose answer without a tool call
	CauseTruncated    = "truncated"      // the probe answer hit max_tokens before any call
	CauseBadToolCall  = "bad_tool_call"  // a structured call whose name or arguments are broken
	CauseTimeout      = "timeout"        // the probe request ran past the per-request timeout
	CauseServerError  = "server_error"   // any other failure of the server
)

// PreflightError is a failed preflight: the step that failed ("models" or
// "probe"), the likely cause, what was seen (server text quoted) and a
// hint saying what to do.
type PreflightError struct {
	Step   string `json:"step"`
	Cause  string `json:"cause"`
	Detail string `json:"detail"`
	Hint   string `json:"hint"`
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("preflight %s: %s: %s\nhint: %s", e.Step, e.Cause, e.Detail, e.Hint)
}

// PreflightResult is a passed preflight.
type PreflightResult struct {
	Model        string   `json:"model"`            // the model the run will use
	Models       []string `json:"models,omitempty"` // what GET /v1/models listed (at most 20)
	ProbeTool    string   `json:"probe_tool"`       // the tool the probe's structured call named
	ProbeRequest string   `json:"probe_request"`    // the probe response's id
	Notes        []string `json:"notes,omitempty"`
}

// PreflightTool is the one tool the probe offers.
const PreflightTool = "get_weather"

// preflightPrompt asks for exactly one call; "tool rounds: 1" tells the twin
// (and the test servers that read it) that this round must call a tool.
const preflightPrompt = "kvcanary preflight check: what is the weather in Paris right now? Call the get_weather tool once; tool rounds: 1."

var preflightTools = []byte(`[{"type":"function","function":{"name":"get_weather","description":"Current weather for a place","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}}]`)

// Preflight checks, before any session, that opts.URL can be measured: the
// endpoint answers GET /v1/models, the model (opts.Model, or the first
// listed when empty) is among them, and one probe chat request offering one
// tool (with opts' headers, sampling, stream and timeout) comes back with a
// structured tool call — not markup in content, not prose. PreflightProbes
// probes with different prompts go at once, and one structured call passes
// (see preflightCities). A failure is a
// *PreflightError naming the likely cause and what to do; other errors are
// invalid options.
func Preflight(ctx context.Context, opts HarnessOptions) (*PreflightResult, error) {
	o := opts
	o.Sessions, o.Concurrency = 1, 1
	if err := o.defaults(); err != nil {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	if o.ownClient {
		defer o.Client.CloseIdleConnections()
	}
	endpoint, err := ChatEndpoint(o.URL)
	if err != nil {
		return nil, fmt.Errorf("preflight: %w", err)
	}
	res := &PreflightResult{}
	if err := preflightModels(ctx, &o, endpoint, res); err != nil {
		return nil, err
	}
	o.Model = res.Model
	d := &driver{opts: &o, endpoint: endpoint, preflight: true}
	type outcome struct {
		tool, id string
		err      error
	}
	outs := make([]outcome, len(preflightCities))
	var wg sync.WaitGroup
	for k, city := range preflightCities {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[k].tool, outs[k].id, outs[k].err = d.probe(ctx, city)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("preflight: %w", ctx.Err())
	}
	var first, fatal error
	failed := 0
	for _, p := range outs {
		if p.err == nil {
			continue
		}
		failed++
		var pe *PreflightError
		if errors.As(p.err, &pe) && retryable(pe.Cause) {
			first = cmp.Or(first, p.err)
		} else {
			fatal = cmp.Or(fatal, p.err)
		}
	}
	if fatal != nil {
		return nil, fatal // auth, timeout, server errors: the server, not the model
	}
	for _, p := range outs {
		if p.err != nil {
			continue
		}
		res.ProbeTool, res.ProbeRequest = p.tool, p.id
		if failed > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d of %d preflight probes failed (%s) while another came back as a structured call: "+
				"the server parses tool calls, so those failures may be the corruption under test", failed, len(outs), first.(*PreflightError).Cause))
		}
		if p.tool != PreflightTool {
			res.Notes = append(res.Notes, fmt.Sprintf("the probe asked for %s and the model called %s", PreflightTool, strconv.Quote(p.tool)))
		}
		return res, nil
	}
	return nil, first
}

// preflightCities are the probes' prompts, sent at once: a server that
// corrupts some answers (the very thing measured; the twin with CUDA graphs
// corrupts most lone requests) may spoil a probe, and a sampled model may
// skip the tool once, but a misconfigured server fails every probe. One
// structured call passes.
var preflightCities = []string{"Paris", "Oslo", "Lisbon", "Kyoto"}

// PreflightProbes is how many probe requests Preflight sends at once.
var PreflightProbes = len(preflightCities)

// retryable reports the probe failures another probe may not repeat.
func retryable(cause string) bool {
	switch cause {
	case CauseNoToolParser, CauseIgnoresTools, CauseBadToolCall, CauseTruncated:
		return true
	}
	return false
}

// probe sends one probe request and returns the structured call's tool name
// and the response id, or a *PreflightError.
func (d *driver) probe(ctx context.Context, city string) (tool, id string, err error) {
	o := d.opts
	prompt := strings.Replace(preflightPrompt, "Paris", city, 1)
	msgs := [][]byte{append(append([]byte(`{"role":"user","content":`), quoteJSON(prompt)...), '}')}
	resp, err := d.do(ctx, msgs, preflightTools)
	if err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return "", "", probeFailure(o, d.endpoint, err)
	}
	r := resp.round
	if m := o.Classifier.Leak(r.Content); m != "" {
		return "", "", noParser(fmt.Sprintf("the probe's tool call came back as text in content (markup %s): %s", m, quoteClip(r.Content)))
	}
	if m := o.Classifier.Leak(r.ReasoningContent); m != "" {
		return "", "", noParser(fmt.Sprintf("the probe's tool call came back as text in reasoning_content (markup %s): %s", m, quoteClip(r.ReasoningContent)))
	}
	if r.ToolCalls == 0 && looksLikeJSONCall(r.Content) {
		return "", "", noParser("the probe's tool call came back as JSON text in content: " + quoteClip(r.Content))
	}
	if r.ToolCalls == 0 && r.BadToolCalls > 0 {
		return "", "", &PreflightError{Step: "probe", Cause: CauseBadToolCall,
			Detail: fmt.Sprintf("the probe's structured tool call has an empty name or arguments that are not a JSON object (finish %s)", strconv.Quote(r.FinishReason)),
			Hint:   "the server parsed a call but broke it: check that the tool-call parser matches the model (SGLang --tool-call-parser, vLLM --tool-call-parser); every session would read as no_tool"}
	}
	if r.ToolCalls == 0 {
		if r.FinishReason == "length" {
			return "", "", &PreflightError{Step: "probe", Cause: CauseTruncated,
				Detail: "the probe's answer stopped at max_tokens before any tool call: " + quoteClip(r.Content+r.ReasoningContent),
				Hint:   "raise --max-tokens (a reasoning model may think for long before it calls a tool), or leave it unset"}
		}
		return "", "", &PreflightError{Step: "probe", Cause: CauseIgnoresTools,
			Detail: fmt.Sprintf("the model answered in prose without calling the offered tool (finish %s): %s", strconv.Quote(r.FinishReason), quoteClip(r.Content)),
			Hint: "the model may not support tool calling, or the chat template drops the tools (SGLang and vLLM --chat-template); " +
				"every session would read as no_tool. If the model does call tools and these probes were unlucky, rerun with --no-preflight"}
	}
	return resp.calls[0].Function.Name, resp.id, nil
}

func noParser(detail string) *PreflightError {
	return &PreflightError{Step: "probe", Cause: CauseNoToolParser, Detail: detail,
		Hint: "the server did not parse the model's tool call: start SGLang with --tool-call-parser NAME (e.g. qwen25, llama3, mistral, deepseekv3) " +
			"or vLLM with --enable-auto-tool-choice --tool-call-parser NAME (e.g. hermes, llama3_json, mistral), NAME matching the model; " +
			"every session would read as leak. If the server is known to parse this model's tool calls, the leaks may be the corruption itself: rerun with --no-preflight"}
}

// preflightModels asks GET /v1/models and settles the model.
func preflightModels(ctx context.Context, o *HarnessOptions, endpoint string, res *PreflightResult) error {
	u := strings.TrimSuffix(endpoint, "/chat/completions") + "/models"
	timeout := min(o.Timeout, 15*time.Second)
	rctx, cancel := context.WithTimeoutCause(ctx, timeout, errTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	o.setHeaders(req)
	resp, err := o.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("preflight: %w", ctx.Err())
		}
		if errors.Is(context.Cause(rctx), errTimeout) {
			err = fmt.Errorf("no answer within %v", timeout)
		}
		return unreachable(o, "models", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return authFailure(o, "models", fmt.Sprintf("GET %s answered HTTP %d: %s", u, resp.StatusCode, o.scrub(errorMessage(body))))
	case resp.StatusCode == http.StatusNotFound && o.Model != "":
		// Not every server lists models; the probe will tell whether the
		// named model answers.
		res.Model = o.Model
		res.Notes = append(res.Notes, "GET /v1/models answered 404; the model was not checked")
		return nil
	case resp.StatusCode != http.StatusOK:
		return &PreflightError{Step: "models", Cause: CauseNotOpenAI,
			Detail: fmt.Sprintf("GET %s answered HTTP %d: %s", u, resp.StatusCode, o.scrub(errorMessage(body))),
			Hint:   "--url should be the OpenAI-compatible server's base (http://host:port or …/v1); pass --model when the server lists no models"}
	}
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err := json.Unmarshal(body, &m); err != nil || ct == "text/html" {
		return &PreflightError{Step: "models", Cause: CauseNotOpenAI,
			Detail: fmt.Sprintf("GET %s answered 200 with no OpenAI model list (Content-Type %s): %s", u, strconv.Quote(ct), quoteClip(string(body))),
			Hint:   "--url points at something other than an OpenAI-compatible server (a login page or proxy?); use the server's base URL"}
	}
	for _, d := range m.Data {
		if d.ID != "" && len(res.Models) < 20 {
			res.Models = append(res.Models, d.ID)
		}
	}
	switch {
	case o.Model == "" && len(res.Models) == 0:
		return &PreflightError{Step: "models", Cause: CauseModelMissing, Detail: fmt.Sprintf("GET %s lists no models", u),
			Hint: "the server has no model loaded yet (still starting?), or pass --model NAME"}
	case o.Model == "":
		res.Model = res.Models[0]
		return nil
	}
	for _, d := range m.Data {
		if d.ID == o.Model {
			res.Model = o.Model
			return nil
		}
	}
	quoted := make([]string, len(res.Models))
	for k, id := range res.Models {
		quoted[k] = strconv.Quote(id)
	}
	return &PreflightError{Step: "models", Cause: CauseModelMissing,
		Detail: fmt.Sprintf("model %s is not among the server's models (%s)", strconv.Quote(o.Model), strings.Join(quoted, ", ")),
		Hint:   "pass --model with one of the listed names (SGLang --served-model-name, vLLM --served-model-name), or omit --model to use the first"}
}

// probeFailure turns the probe request's error into a PreflightError.
func probeFailure(o *HarnessOptions, endpoint string, err error) error {
	detail := o.scrub(err.Error())
	var se *statusError
	var ue *url.Error
	switch {
	case errors.Is(err, errTimeout):
		return &PreflightError{Step: "probe", Cause: CauseTimeout, Detail: "POST " + endpoint + ": " + detail,
			Hint: "the server lists models but did not answer one short request in time: it may be loading, overloaded or stuck; raise --timeout or check its log"}
	case errors.As(err, &se) && (se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden):
		return authFailure(o, "probe", "POST "+endpoint+": "+detail)
	case errors.As(err, &se) && se.Code == http.StatusBadRequest && strings.Contains(strings.ToLower(se.Message), "tool"):
		// vLLM without --enable-auto-tool-choice refuses "tool_choice": "auto".
		return &PreflightError{Step: "probe", Cause: CauseNoToolParser, Detail: "POST " + endpoint + ": " + detail,
			Hint: "the server refuses tool calling: start vLLM with --enable-auto-tool-choice --tool-call-parser NAME, or SGLang with --tool-call-parser NAME, NAME matching the model"}
	case errors.As(err, &se) && se.Code == http.StatusNotFound && strings.Contains(strings.ToLower(se.Message), "model"):
		return &PreflightError{Step: "probe", Cause: CauseModelMissing, Detail: "POST " + endpoint + ": " + detail,
			Hint: "pass --model with a name the server serves (GET /v1/models lists them)"}
	case errors.As(err, &se) && se.Code == http.StatusNotFound:
		return &PreflightError{Step: "probe", Cause: CauseNotOpenAI, Detail: "POST " + endpoint + ": " + detail,
			Hint: "no chat completions endpoint at this URL: --url should be the server's base (http://host:port or …/v1)"}
	case errors.As(err, &se):
		return &PreflightError{Step: "probe", Cause: CauseServerError, Detail: "POST " + endpoint + ": " + detail,
			Hint: "the server failed one short tool-calling request; its log says why"}
	case errors.As(err, &ue):
		return unreachable(o, "probe", endpoint, err)
	}
	return &PreflightError{Step: "probe", Cause: CauseServerError, Detail: "POST " + endpoint + ": " + detail,
		Hint: "the answer to one short tool-calling request was not a usable OpenAI response (see above); check --url and the server's log"}
}

func unreachable(o *HarnessOptions, step, u string, err error) *PreflightError {
	why := "no connection"
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dns):
		why = "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout(), strings.Contains(err.Error(), "no answer within"):
		why = "timed out"
	}
	return &PreflightError{Step: step, Cause: CauseUnreachable, Detail: fmt.Sprintf("%s: %s (%s)", u, why, o.scrub(err.Error())),
		Hint: "nothing answers at --url: check the host, the port, http vs https, that the server is up and listening on that address, and any proxy (HTTP_PROXY, NO_PROXY)"}
}

func authFailure(o *HarnessOptions, step, detail string) *PreflightError {
	hint := "the server wants credentials: pass --api-key KEY (or set OPENAI_API_KEY), or --header 'NAME: VALUE' for another scheme"
	if o.APIKey != "" || len(o.Headers) > 0 {
		hint = "the server refused the credentials sent (--api-key / OPENAI_API_KEY / --header): check that the key is valid for this server"
	}
	return &PreflightError{Step: step, Cause: CauseAuth, Detail: detail, Hint: hint}
}

// looksLikeJSONCall reports content that is a tool call written as JSON
// ({"name": …, "arguments"|"parameters": …}, alone or in a list), which a
// server without a tool-call parser returns for Llama-style models.
func looksLikeJSONCall(content string) bool {
	t := strings.TrimSpace(content)
	t = strings.TrimSuffix(strings.TrimPrefix(t, "```json"), "```")
	t = strings.TrimSpace(t)
	if t == "" || (t[0] != '{' && t[0] != '[') {
		return false
	}
	return strings.Contains(t, `"name"`) && (strings.Contains(t, `"arguments"`) || strings.Contains(t, `"parameters"`))
}

func quoteClip(s string) string { return strconv.Quote(clip(s, 200)) }

// statusError is a non-200 answer.
type statusError struct {
	Code       int
	Message    string        // the OpenAI error message, or the body's beginning quoted
	retryAfter time.Duration // > 0: a throttling answer (429), to be sent again after it
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Message) }
