package repro

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/kvcanary/kvcanary/spec/openaiwire"
	"github.com/kvcanary/kvcanary/spec/outcome"
)

// MaxConversationLine bounds one line of a conversations file.
const MaxConversationLine = 16 << 20

// Conversation is one of the user's own tool-calling sessions, replayed by
// the harness instead of a synthetic task (HarnessOptions.Conversations).
//
// The file format (kvcanary repro --conversations FILE.jsonl) is JSON Lines:
// one JSON object per line, blank lines skipped. Its fields:
//
//	messages      required: the OpenAI chat messages the session starts from
//	              (roles system, developer, user, assistant, tool), sent as
//	              written; at least one user message, and the last message is
//	              a user or tool message (the model speaks next)
//	tools         the OpenAI tools offered every round (a list of
//	              {"type":"function","function":{"name":…,…}}); absent: the
//	              harness's own catalogue
//	tool_rounds   how many rounds, counted from the first replayed request,
//	              must call a tool (default: the length of expect_tools, else 1;
//	              0: any round may answer in text)
//	rounds        most rounds of this session (default --rounds; raised to
//	              tool_rounds when below it)
//	expect_tools  tool names, one per round from the first: a round whose
//	              calls do not include its expected name is no_tool ("called
//	              X, expected Y"); each name must be offered
//	id            the session's name in results and bundles (default cNNN,
//	              NNN the conversation's 0-based order in the file)
//
// OpenAI request fields that the command's flags decide (model,
// temperature, top_p, max_tokens, max_completion_tokens, seed, stream,
// stream_options, tool_choice, parallel_tool_calls, n, stop, user,
// metadata) are accepted and ignored, so logged request bodies can be
// replayed as they are; any other field is an error. Every tool call the
// model makes is answered with ToolResult, as for synthetic tasks, and the
// session is classified with the same outcome classes.
type Conversation struct {
	ID          string
	Line        int // 1-based line in its file
	ToolRounds  int
	Rounds      int // 0: HarnessOptions.Rounds
	ExpectTools []string

	messages [][]byte // compact JSON of each message
	tools    []byte   // compact JSON array; nil: the harness's catalogue
}

// ignoredConversationFields are OpenAI request fields a line may carry.
var ignoredConversationFields = map[string]bool{"model": true, "temperature": true, "top_p": true, "max_tokens": true,
	"max_completion_tokens": true, "seed": true, "stream": true, "stream_options": true, "tool_choice": true,
	"parallel_tool_calls": true, "n": true, "stop": true, "user": true, "metadata": true}

var conversationFields = map[string]bool{"id": true, "messages": true, "tools": true, "tool_rounds": true, "rounds": true, "expect_tools": true}

var messageRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// LoadConversations reads a conversations file (see Conversation) and
// returns its conversations and the hex SHA-256 of its bytes. Errors name
// the file and line.
func LoadConversations(path string) ([]Conversation, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("conversations: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	convs, err := ReadConversations(io.TeeReader(f, h), path)
	if err != nil {
		return nil, "", err
	}
	return convs, hex.EncodeToString(h.Sum(nil)), nil
}

// ReadConversations reads conversations in the JSON Lines format of
// Conversation from r; name (a file path) prefixes errors as name:line.
func ReadConversations(r io.Reader, name string) ([]Conversation, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxConversationLine)
	var out []Conversation
	ids := map[string]int{}
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\xef\xbb\xbf"))
		}
		if len(text) == 0 {
			continue
		}
		c, err := parseConversation(text, len(out))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		c.Line = line
		if prev, dup := ids[c.ID]; dup {
			return nil, fmt.Errorf("%s:%d: id %q already used on line %d", name, line, c.ID, prev)
		}
		ids[c.ID] = line
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, line+1, MaxConversationLine)
		}
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no conversations (want one JSON object per line with \"messages\")", name)
	}
	return out, nil
}

func parseConversation(text []byte, index int) (Conversation, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(text, &fields); err != nil {
		return Conversation{}, fmt.Errorf("invalid JSON object: %w", jsonOffset(text, err))
	}
	var unknown []string
	for k := range fields {
		if !conversationFields[k] && !ignoredConversationFields[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Conversation{}, fmt.Errorf("unknown field %q (want messages, tools, tool_rounds, rounds, expect_tools, id)", unknown[0])
	}
	var w struct {
		ID          *string           `json:"id"`
		Messages    []json.RawMessage `json:"messages"`
		Tools       json.RawMessage   `json:"tools"`
		ToolRounds  *int              `json:"tool_rounds"`
		Rounds      *int              `json:"rounds"`
		ExpectTools []string          `json:"expect_tools"`
	}
	if err := json.Unmarshal(text, &w); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Conversation{}, fmt.Errorf("field %q: want %s, not a JSON %s", te.Field, te.Type, te.Value)
		}
		return Conversation{}, err
	}
	c := Conversation{ID: fmt.Sprintf("c%03d", index), ExpectTools: w.ExpectTools}
	if w.ID != nil {
		if strings.TrimSpace(*w.ID) == "" {
			return c, errors.New("id: empty")
		}
		c.ID = *w.ID
	}
	if len(w.Messages) == 0 {
		return c, errors.New("messages: missing or empty (want the OpenAI chat messages the session starts from)")
	}
	users, last := 0, ""
	for k, m := range w.Messages {
		var msg struct {
			Role *string `json:"role"`
		}
		if err := json.Unmarshal(m, &msg); err != nil || msg.Role == nil {
			return c, fmt.Errorf("messages[%d]: want an object with a \"role\"", k)
		}
		if !messageRoles[*msg.Role] {
			return c, fmt.Errorf("messages[%d]: role %q (want system, developer, user, assistant or tool)", k, *msg.Role)
		}
		if *msg.Role == "user" {
			users++
		}
		last = *msg.Role
		var buf bytes.Buffer
		if err := json.Compact(&buf, m); err != nil {
			return c, fmt.Errorf("messages[%d]: %w", k, err)
		}
		c.messages = append(c.messages, buf.Bytes())
	}
	if users == 0 {
		return c, errors.New("messages: no user message")
	}
	if last != "user" && last != "tool" {
		return c, fmt.Errorf("messages: the last message is %s; want user or tool (the model speaks next)", last)
	}
	offered := map[string]bool{}
	if len(w.Tools) > 0 && string(w.Tools) != "null" {
		var tools []struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(w.Tools, &tools); err != nil {
			return c, fmt.Errorf("tools: want a list of {\"type\":\"function\",\"function\":{\"name\":…}}: %w", err)
		}
		if len(tools) == 0 {
			return c, errors.New("tools: empty list (omit it for the harness's catalogue)")
		}
		for k, t := range tools {
			if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
				return c, fmt.Errorf("tools[%d]: want {\"type\":\"function\",\"function\":{\"name\":…}}", k)
			}
			offered[t.Function.Name] = true
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, w.Tools); err != nil {
			return c, fmt.Errorf("tools: %w", err)
		}
		c.tools = buf.Bytes()
	} else {
		for _, t := range harnessTools {
			offered[t.name] = true
		}
	}
	for k, n := range w.ExpectTools {
		if !offered[n] {
			return c, fmt.Errorf("expect_tools[%d]: %q is not an offered tool", k, n)
		}
	}
	c.ToolRounds = 1
	if len(w.ExpectTools) > 0 {
		c.ToolRounds = len(w.ExpectTools)
	}
	if w.ToolRounds != nil {
		if *w.ToolRounds < 0 {
			return c, fmt.Errorf("tool_rounds %d: want 0 or more", *w.ToolRounds)
		}
		c.ToolRounds = *w.ToolRounds
	}
	if w.Rounds != nil {
		if *w.Rounds < 1 {
			return c, fmt.Errorf("rounds %d: want at least 1", *w.Rounds)
		}
		if *w.Rounds < c.ToolRounds {
			return c, fmt.Errorf("rounds %d: below tool_rounds %d", *w.Rounds, c.ToolRounds)
		}
		c.Rounds = *w.Rounds
	}
	return c, nil
}

// judgeCalls checks a round's well-formed calls against expect_tools:
// no_tool when the round has an expected name and no call has it.
func (c *Conversation) judgeCalls(round int, calls []openaiwire.ToolCall) (oc outcome.Class, reason string) {
	if round >= len(c.ExpectTools) {
		return "", ""
	}
	want := c.ExpectTools[round]
	var got []string
	for _, call := range calls {
		if call.Function.Name == want {
			return "", ""
		}
		got = append(got, fmt.Sprintf("%q", call.Function.Name))
	}
	return outcome.NoTool, fmt.Sprintf("called %s, expected %q", strings.Join(got, ", "), want)
}

// prepareConversations checks the options' conversations (they must come
// from ReadConversations).
func (d *driver) prepareConversations() error {
	for k := range d.opts.Conversations {
		if len(d.opts.Conversations[k].messages) == 0 {
			return fmt.Errorf("conversation %d (%q) has no messages: build conversations with ReadConversations", k, d.opts.Conversations[k].ID)
		}
	}
	return nil
}
