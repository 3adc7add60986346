package server

import (
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"github.com/kvcanary/kvcanary/runtime/sim"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
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

func (s *sseWriter) send(d openaiwire.Delta, finish *string) {
	s.event(openaiwire.Chunk{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []openaiwire.ChunkChoice{{Index: 0, Delta: d, FinishReason: finish}}})
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
func (s *Server) stream(sw *sseWriter, parsed sim.Parsed, calls []openaiwire.ToolCall, finish string, u openaiwire.Usage, withUsage bool) {
	step := 4 * s.opts.StreamChunkTokens
	for _, p := range pieces(parsed.Content, step) {
		sw.send(openaiwire.Delta{Content: ptr(p)}, nil)
	}
	for i, c := range calls {
		first := openaiwire.ToolCall{Index: ptr(i), ID: c.ID, Type: "function"}
		first.Function.Name = c.Function.Name
		sw.send(openaiwire.Delta{ToolCalls: []openaiwire.ToolCall{first}}, nil)
		for _, p := range pieces(c.Function.Arguments, step) {
			d := openaiwire.ToolCall{Index: ptr(i)}
			d.Function.Arguments = p
			sw.send(openaiwire.Delta{ToolCalls: []openaiwire.ToolCall{d}}, nil)
		}
	}
	sw.send(openaiwire.Delta{}, ptr(finish))
	if withUsage {
		sw.event(openaiwire.Chunk{ID: sw.id, Object: "chat.completion.chunk", Created: sw.created, Model: sw.model, Choices: []openaiwire.ChunkChoice{}, Usage: &u})
	}
	sw.done()
}
