package openaiwire

import "encoding/json"

// ProbeHeader marks a request a client sends to check the server before its
// sessions (kvcanary repro's preflight probes): it belongs to no session, so
// a server that counts sessions (the twin's sim serve) leaves it out of them.
// Any server may ignore it.
const ProbeHeader = "X-Kvcanary-Probe"

// Request is the subset of a chat completion request the twin reads.
// Unknown fields are ignored, as SGLang and vLLM do.
type Request struct {
	Model               string           `json:"model"`
	Messages            []RequestMessage `json:"messages"`
	Tools               []Tool           `json:"tools"`
	ToolChoice          json.RawMessage  `json:"tool_choice"`
	Stream              bool             `json:"stream"`
	StreamOptions       *StreamOptions   `json:"stream_options"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	N                   *int             `json:"n"`
}

// StreamOptions is a request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// RequestMessage is one entry of a request's messages. Content stays raw: a
// string or an array of parts.
type RequestMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []ToolCall      `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	Name       string          `json:"name"`
}

// Tool is one entry of a request's tools as the twin reads it.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

// ToolCall is one entry of tool_calls: in a message (id, type, function) or
// in a streamed delta (index, then id, type and name on the call's first
// delta and pieces of the arguments after). Empty fields are omitted, except
// arguments.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a tool call's function: its name and its arguments, a
// JSON object as text.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Usage is an answer's token counts.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Message is the assistant message of a non-streamed answer. Content is null
// when the answer is tool calls only; reasoning_content is what reasoning
// parsers (SGLang, vLLM) split off.
type Message struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// Choice is one choice of a non-streamed answer. FinishReason is null while
// unknown.
type Choice struct {
	Index        int       `json:"index"`
	Message      Message   `json:"message"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// Response is a non-streamed chat completion ("object": "chat.completion").
type Response struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Delta is what one streamed chunk adds to the answer.
type Delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ChunkChoice is one choice of a streamed chunk; FinishReason is set on the
// last one.
type ChunkChoice struct {
	Index        int       `json:"index"`
	Delta        Delta     `json:"delta"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

// Chunk is one server-sent event of a streamed answer ("object":
// "chat.completion.chunk"). A server that fails mid-stream sends an event
// holding only an error instead.
type Chunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []ChunkChoice  `json:"choices"`
	Usage   *Usage         `json:"usage,omitempty"`
	Error   *ErrorResponse `json:"error,omitempty"`
}

// ErrorResponse is the part of any server's error a client reads: the
// message. Servers disagree on the other fields' types (vLLM's code is a
// number, OpenAI's a string), so a client decodes only this.
type ErrorResponse struct {
	Message string `json:"message"`
}
