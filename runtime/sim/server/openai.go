package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/kvcanary/kvcanary/spec/openaiwire"
	"io"
	"net/http"
	"strings"
)

// chatRequest is a decoded request and what validate derives from it.
type chatRequest struct {
	openaiwire.Request

	texts []string // Messages[i].Content as text (string, or the text parts joined)
}

// apiError is an OpenAI-style error; its JSON form is {"error": {...}}.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	cause   error   // the error behind it, when there is one
}

// refusal is an error with a status other than 400.
func refusal(status int, param, code, format string, args ...any) *apiError {
	e := badRequest(param, code, format, args...)
	e.Status = status
	return e
}

func (e *apiError) Error() string { return e.Message }

func badRequest(param, code, format string, args ...any) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(struct {
		Error *apiError `json:"error"`
	}{e})
}

// decodeRequest reads and validates a chat completion request body.
func decodeRequest(body io.Reader, limit int64) (*chatRequest, *apiError) {
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		e := badRequest("", "", "read request body: %v", err)
		e.cause = err
		return nil, e
	}
	if int64(len(data)) > limit {
		e := badRequest("", "request_too_large", "request body exceeds %d bytes", limit)
		e.Status = http.StatusRequestEntityTooLarge
		return nil, e
	}
	// Decode into the wire type itself, not the wrapper: a type error
	// names the field by its JSON path ("messages"), not "Request.messages".
	var req chatRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&req.Request); err != nil {
		return nil, jsonError(data, dec, err)
	}
	if dec.More() {
		return nil, badRequest("", "invalid_json", "request body: unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return &req, req.validate()
}

func jsonError(data []byte, dec *json.Decoder, err error) *apiError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case len(bytes.TrimSpace(data)) == 0:
		return badRequest("", "invalid_json", "request body is empty; want a JSON object")
	case errors.As(err, &se):
		// Offset counts the bytes read including the bad one: name the bad
		// byte's 0-based position.
		return badRequest("", "invalid_json", "request body: invalid JSON at byte %d: %v", max(se.Offset-1, 0), err)
	case errors.As(err, &te):
		return badRequest(te.Field, "invalid_type", "request body: field %q at byte %d: want %s, got JSON %s", te.Field, te.Offset, te.Type, te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "invalid_json", "request body: JSON ends early at byte %d", len(data))
	}
	return badRequest("", "invalid_json", "request body at byte %d: %v", dec.InputOffset(), err)
}

var validRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

func (r *chatRequest) validate() *apiError {
	if r.Model == "" {
		return badRequest("model", "missing_required_parameter", "you must provide a model parameter")
	}
	if len(r.Messages) == 0 {
		return badRequest("messages", "missing_required_parameter", "messages must be a non-empty array")
	}
	if r.N != nil && *r.N != 1 {
		return badRequest("n", "unsupported_value", "n=%d: the twin returns exactly one choice", *r.N)
	}
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if p.v != nil && *p.v < 1 {
			return badRequest(p.name, "invalid_value", "%s=%d: want at least 1", p.name, *p.v)
		}
	}
	for i := range r.Tools {
		t := &r.Tools[i]
		if t.Type != "function" {
			return badRequest(fmt.Sprintf("tools[%d].type", i), "invalid_value", "tools[%d].type %q: want \"function\"", i, t.Type)
		}
		if t.Function.Name == "" {
			return badRequest(fmt.Sprintf("tools[%d].function.name", i), "missing_required_parameter", "tools[%d].function.name is empty", i)
		}
	}
	if len(r.ToolChoice) > 0 {
		var s string
		var obj struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(r.ToolChoice, &s) == nil {
			if s != "none" && s != "auto" && s != "required" {
				return badRequest("tool_choice", "invalid_value", "tool_choice %q: want none, auto, required or an object", s)
			}
		} else if json.Unmarshal(r.ToolChoice, &obj) != nil || obj.Type != "function" {
			return badRequest("tool_choice", "invalid_value", "tool_choice: want a string or {\"type\":\"function\",...}")
		}
	}
	haveUser := false
	r.texts = make([]string, len(r.Messages))
	for i := range r.Messages {
		m := &r.Messages[i]
		param := fmt.Sprintf("messages[%d]", i)
		if !validRoles[m.Role] {
			return badRequest(param+".role", "invalid_value", "%s.role %q: want system, developer, user, assistant or tool", param, m.Role)
		}
		text, err := contentText(m.Content)
		if err != nil {
			return badRequest(param+".content", "invalid_type", "%s.content: %v", param, err)
		}
		r.texts[i] = text
		switch m.Role {
		case "user":
			haveUser = true
		case "tool":
			if m.ToolCallID == "" {
				return badRequest(param+".tool_call_id", "missing_required_parameter", "%s: a tool message needs tool_call_id", param)
			}
		case "assistant":
			for j, c := range m.ToolCalls {
				if c.Function.Name == "" {
					return badRequest(fmt.Sprintf("%s.tool_calls[%d].function.name", param, j), "missing_required_parameter",
						"%s.tool_calls[%d].function.name is empty", param, j)
				}
			}
		}
		if m.Role != "assistant" && len(m.ToolCalls) > 0 {
			return badRequest(param+".tool_calls", "invalid_value", "%s: only assistant messages carry tool_calls", param)
		}
	}
	if !haveUser {
		return badRequest("messages", "invalid_value", "messages: want at least one user message (it names the session)")
	}
	return nil
}

// contentText returns a message's content as text: a string, null, or an
// array of {"type":"text","text":...} parts (other part types are refused).
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", fmt.Errorf("want a string or an array of content parts: %v", err)
		}
		var b strings.Builder
		for i, p := range parts {
			if p.Type != "text" || p.Text == nil {
				return "", fmt.Errorf("part %d: type %q: the twin reads text parts only", i, p.Type)
			}
			b.WriteString(*p.Text)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("want a string, null or an array of content parts")
}

// toolsOffered reports whether the request lets the model call a tool.
func (r *chatRequest) toolsOffered() bool {
	if len(r.Tools) == 0 {
		return false
	}
	var s string
	if json.Unmarshal(r.ToolChoice, &s) == nil && s == "none" {
		return false
	}
	return true
}
