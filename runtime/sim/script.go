package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// ScriptRound is one round of a session's script: the assistant output the
// round expects and, for a tool-call round, the tool result the client sends
// back.
type ScriptRound struct {
	ToolCall bool       // the round expects a tool call (else a plain-text answer)
	Calls    []ToolCall // the expected calls of a tool-call round
	Expected []Token    // the exact expected output tokens (without EOS)
	Result   []Token    // tool result of a tool-call round
}

// Script is a session's ground truth: a system prompt with tool
// definitions, a user task, and the rounds a correct model goes through —
// tool calls, then a final plain-text answer.
type Script struct {
	Session string
	Prefix  []Token // BOS, system prompt, tool definitions, user task
	Rounds  []ScriptRound
}

// Turn is one round of history: what the assistant actually said and the
// tool result the client returned (empty after a plain-text answer).
type Turn struct {
	Output []Token
	Result []Token
}

type toolSpec struct {
	name   string
	params []paramSpec
}

type paramSpec struct {
	name string
	kind string // "text", "word", "int", "bool", "array"
}

var toolSpecs = []toolSpec{
	{"get_weather", []paramSpec{{"location", "word"}, {"unit", "word"}, {"days_ahead", "int"}}},
	{"search_web", []paramSpec{{"query", "text"}, {"max_results", "int"}}},
	{"read_file", []paramSpec{{"path", "text"}, {"offset", "int"}, {"limit", "int"}}},
	{"list_files", []paramSpec{{"path", "text"}, {"recursive", "bool"}, {"pattern", "word"}}},
	{"run_command", []paramSpec{{"command", "text"}, {"timeout_seconds", "int"}}},
	{"get_stock_price", []paramSpec{{"symbol", "word"}, {"currency", "word"}}},
	{"send_email", []paramSpec{{"to_address", "word"}, {"subject", "text"}, {"body", "text"}}},
	{"create_event", []paramSpec{{"subject", "text"}, {"start_time", "word"}, {"duration_minutes", "int"}, {"headers", "array"}}},
	{"query_database", []paramSpec{{"sql", "text"}, {"limit", "int"}}},
	{"fetch_url", []paramSpec{{"url", "word"}, {"headers", "array"}, {"timeout_seconds", "int"}}},
}

// plainWords are the words prose is drawn from (no markup pieces).
var plainWords = func() []string {
	var out []string
	for _, w := range vocabWords {
		if !strings.ContainsAny(w, "_") {
			out = append(out, w)
		}
	}
	return out
}()

func sentence(r *rand.Rand, words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(plainWords[r.IntN(len(plainWords))])
	}
	b.WriteByte('.')
	return b.String()
}

// prose returns sentences until the text reaches about tokens tokens.
func prose(r *rand.Rand, tokens int) string {
	var b strings.Builder
	n := 0
	for n < tokens {
		w := 6 + r.IntN(10)
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(sentence(r, w))
		n += 2 * w
		if r.IntN(5) == 0 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func paramValue(r *rand.Rand, kind string) (string, bool) {
	switch kind {
	case "text":
		return strings.TrimSuffix(sentence(r, 4+r.IntN(8)), "."), true
	case "word":
		return plainWords[r.IntN(len(plainWords))], true
	case "int":
		return strconv.Itoa(1 + r.IntN(500)), false
	case "bool":
		return strconv.FormatBool(r.IntN(2) == 0), false
	default: // array of strings and numbers
		return fmt.Sprintf(`["%s", %d]`, plainWords[r.IntN(len(plainWords))], r.IntN(100)), false
	}
}

func toolDefinitions() string {
	var b strings.Builder
	b.WriteString("## Tools\nYou can call these functions. To call a function, reply with this format:\n")
	b.WriteString(RenderDSML([]ToolCall{{Name: "$FUNCTION_NAME", Params: []Param{
		{Name: "$PARAMETER_NAME", String: true, Value: "$PARAMETER_VALUE"},
		{Name: "$OTHER_PARAMETER", String: false, Value: "$JSON_VALUE"},
	}}}))
	b.WriteString("\nUse string=\"true\" for string values and string=\"false\" for numbers, booleans, arrays and objects.\n")
	for _, t := range toolSpecs {
		b.WriteString("- " + t.name + ":")
		for _, p := range t.params {
			b.WriteString(" " + p.name + " (" + p.kind + ")")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// MaxRounds bounds a session's rounds (sim run --rounds, sim serve --rounds,
// a bisect plan's workload.rounds, a conversation's "tool rounds: N"): the
// twin's context (ContextLen tokens) is full by about the 17th tool round,
// so more rounds only make every script bigger and slower to build (10,000
// rounds: 3.7 million tokens and 3.7 s for one session).
const MaxRounds = 32

// NewScript generates session session's script for a run with seed and at
// most rounds rounds. The script needs 1..rounds tool-call rounds (so some
// sessions end by exhausting rounds: "maxrounds") followed by a plain-text
// answer. First prompts are 1–2k tokens, each tool result adds a few
// hundred, each output is 40–80 tokens.
func NewScript(seed uint64, session int, rounds int) Script {
	rounds = min(rounds, MaxRounds) // callers check; a script never grows past it
	r := rand.New(rand.NewPCG(seed, 0x5c41970000+uint64(session)))
	v := DefaultVocab()
	s := Script{Session: fmt.Sprintf("s%03d", session)}
	sys := "You are a helpful assistant. " + prose(r, 600+r.IntN(900)) + "\n" + toolDefinitions()
	task := prose(r, 80+r.IntN(120))
	s.Prefix = append(s.Prefix, TokBOS)
	s.Prefix = v.AppendEncode(s.Prefix, sys)
	s.Prefix = append(s.Prefix, TokUser)
	s.Prefix = v.AppendEncode(s.Prefix, task)
	nTools := max(1, rounds-2+r.IntN(3))
	for i := 0; i < nTools; i++ {
		spec := toolSpecs[r.IntN(len(toolSpecs))]
		call := ToolCall{Name: spec.name}
		for _, p := range spec.params {
			val, isStr := paramValue(r, p.kind)
			call.Params = append(call.Params, Param{Name: p.name, String: isStr, Value: val})
		}
		call.Arguments = argumentsJSON(call.Params)
		s.Rounds = append(s.Rounds, ScriptRound{
			ToolCall: true,
			Calls:    []ToolCall{call},
			Expected: v.Encode(RenderDSML([]ToolCall{call})),
			Result:   v.Encode(prose(r, 200+r.IntN(200))),
		})
	}
	s.Rounds = append(s.Rounds, ScriptRound{Expected: v.Encode(prose(r, 40+r.IntN(40)))})
	return s
}

// OfferedOnly returns s with every expected tool call that names a tool
// outside offered (a request's tool names) replaced by a call to a tool the
// twin knows among them, as a model calls only the tools a request offers.
// The replacement is drawn from its own generator (seed, session, round),
// so the rest of the script stays as NewScript made it. With no known tool
// offered, s is returned as it is.
func (s Script) OfferedOnly(seed uint64, session int, offered []string) Script {
	var known []toolSpec
	for _, t := range toolSpecs {
		if slices.Contains(offered, t.name) {
			known = append(known, t)
		}
	}
	if len(known) == 0 {
		return s
	}
	out := Script{Session: s.Session, Prefix: s.Prefix, Rounds: slices.Clone(s.Rounds)}
	v := DefaultVocab()
	for i := range out.Rounds {
		rd := &out.Rounds[i]
		if !rd.ToolCall || !slices.ContainsFunc(rd.Calls, func(c ToolCall) bool { return !slices.Contains(offered, c.Name) }) {
			continue
		}
		r := rand.New(rand.NewPCG(seed, 0x0ffe7ed00000+uint64(session)<<8+uint64(i)))
		calls := slices.Clone(rd.Calls)
		for j := range calls {
			if slices.Contains(offered, calls[j].Name) {
				continue
			}
			spec := known[r.IntN(len(known))]
			call := ToolCall{Name: spec.name}
			for _, p := range spec.params {
				val, isStr := paramValue(r, p.kind)
				call.Params = append(call.Params, Param{Name: p.name, String: isStr, Value: val})
			}
			call.Arguments = argumentsJSON(call.Params)
			calls[j] = call
		}
		rd.Calls, rd.Expected = calls, v.Encode(RenderDSML(calls))
	}
	return out
}

// BuildPrompt assembles the prompt of the next round: the script prefix,
// the history (each output closed by EOS, then its tool result), the
// round's plan hint (what the answer must contain, closed by EOS) and the
// assistant marker. hint is the position of the plan marker: the copy model
// starts reading at hint+1.
func BuildPrompt(prefix []Token, history []Turn, expected []Token) (prompt []Token, hint int) {
	n := len(prefix) + len(expected) + 4
	for _, h := range history {
		n += len(h.Output) + len(h.Result) + 3
	}
	prompt = make([]Token, 0, n)
	prompt = append(prompt, prefix...)
	for _, h := range history {
		prompt = append(prompt, TokAssistant)
		prompt = append(prompt, h.Output...)
		prompt = append(prompt, TokEOS)
		if len(h.Result) > 0 {
			prompt = append(prompt, TokTool)
			prompt = append(prompt, h.Result...)
		}
	}
	hint = len(prompt)
	prompt = append(prompt, TokHint)
	prompt = append(prompt, expected...)
	prompt = append(prompt, TokEOS, TokAssistant)
	return prompt, hint
}
