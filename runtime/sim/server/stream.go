package server

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/runtime/sim"
)

// sseWriter writes a chat completion as server-sent events.
type sseWriter struct {
	w       http.ResponseWriter
	fl      http.Flusher
	id      string
	created int64
	model   string
	buf     []byte
}

func newSSE(w http.ResponseWriter, id string, created int64, model string) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sseWriter{w: w, fl: fl, id: id, created: created, model: model}
}

func (s *sseWriter) event(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = append(s.buf, b...)
	s.buf = append(s.buf, "\n\n"...)
	_, _ = s.w.Write(s.buf)
}

func (s *sseWriter) send(d delta, finish *string) {
	s.event(chatChunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []chunkChoice{{Index: 0, Delta: d, FinishReason: finish}}})
	s.flush()
}

func (s *sseWriter) sendError(e *apiError) {
	s.event(struct {
		Error *apiError `json:"error"`
	}{e})
	s.flush()
}

func (s *sseWriter) done() {
	_, _ = s.w.Write([]byte("data: [DONE]\n\n"))
	s.flush()
}

func (s *sseWriter) flush() {
	if s.fl != nil {
		s.fl.Flush()
	}
}

// pieces splits text into deltas of about n bytes, on rune boundaries.
func pieces(text string, n int) []string {
	var out []string
	for len(text) > 0 {
		k := min(n, len(text))
		for k < len(text) && !utf8.RuneStart(text[k]) {
			k++
		}
		out = append(out, text[:k])
		text = text[k:]
	}
	return out
}

// stream writes the answer after the role chunk: content deltas, then each
// tool call (id, type and name first, its arguments in pieces), the finish
// chunk, the usage chunk when asked for, and [DONE].
func (s *Server) stream(sw *sseWriter, parsed sim.Parsed, calls []wireToolCall, finish string, u usage, withUsage bool) {
	step := 4 * s.opts.StreamChunkTokens
	for _, p := range pieces(parsed.Content, step) {
		sw.send(delta{Content: ptr(p)}, nil)
	}
	for i, c := range calls {
		first := wireToolCall{Index: ptr(i), ID: c.ID, Type: "function"}
		first.Function.Name = c.Function.Name
		sw.send(delta{ToolCalls: []wireToolCall{first}}, nil)
		for _, p := range pieces(c.Function.Arguments, step) {
			d := wireToolCall{Index: ptr(i)}
			d.Function.Arguments = p
			sw.send(delta{ToolCalls: []wireToolCall{d}}, nil)
		}
	}
	sw.send(delta{}, ptr(finish))
	if withUsage {
		sw.event(chatChunk{ID: sw.id, Object: "chat.completion.chunk", Created: sw.created, Model: sw.model, Choices: []chunkChoice{}, Usage: &u})
	}
	sw.done()
}
