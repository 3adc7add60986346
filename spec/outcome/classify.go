package outcome

import "strings"

// DefaultLeakMarkers are the tool-call markups whose presence in a message's
// content or reasoning_content means the server's tool-call parser did not
// take the model's call: DeepSeek's DSML, Hermes/Qwen <tool_call>, the
// <|tool_call…|> family, DeepSeek V3's tool-calls begin token and Anthropic
// style <function_calls>.
var DefaultLeakMarkers = []string{"｜DSML｜", "<tool_call>", "<|tool_call", "<｜tool▁calls▁begin｜>", "<function_calls>"}

// Round is what one response said, as the classifier sees it.
type Round struct {
	Content          string
	ReasoningContent string
	ToolCalls        int    // well-formed tool calls (name set, arguments a JSON object)
	BadToolCalls     int    // tool calls whose name is empty or arguments are not a JSON object
	FinishReason     string // "stop", "tool_calls", "length", … as the server said
}

// Classifier judges one session round by round, the way the seeds'
// reproducer does. The zero value uses DefaultLeakMarkers.
type Classifier struct {
	Markers []string
}

func (c Classifier) markers() []string {
	if c.Markers == nil {
		return DefaultLeakMarkers
	}
	return c.Markers
}

// Leak returns the first marker found in text, or "".
func (c Classifier) Leak(text string) string {
	for _, m := range c.markers() {
		if m != "" && strings.Contains(text, m) {
			return m
		}
	}
	return ""
}

// Judge classifies one successful response of round round (0-based) of a
// session whose first toolRounds rounds must call a tool. It returns the
// outcome that ends the session — leak, no_tool or done — or "" when the
// session goes on with the tool calls' results, plus a reason for the
// corrupted classes:
//
//   - leak: markup in content or reasoning_content, whatever else the
//     response holds;
//   - no_tool: a round that must call a tool ended (stop, length, …) without a
//     well-formed tool call;
//   - done: a plain-text answer where one is allowed;
//   - "": at least one well-formed tool call.
func (c Classifier) Judge(round, toolRounds int, r Round) (outcome Class, reason string) {
	if m := c.Leak(r.Content); m != "" {
		return Leak, "tool-call markup " + m + " in content"
	}
	if m := c.Leak(r.ReasoningContent); m != "" {
		return Leak, "tool-call markup " + m + " in reasoning_content"
	}
	if r.ToolCalls > 0 {
		return "", ""
	}
	if round < toolRounds {
		reason := "no tool call (finish " + r.FinishReason + ")"
		if r.BadToolCalls > 0 {
			reason = "malformed tool call (finish " + r.FinishReason + ")"
		}
		return NoTool, reason
	}
	return Done, ""
}

// Outcome is Judge for a client that sees a reply as its content, how many
// well-formed tool calls it carried and its finish reason (no reasoning
// content, no malformed calls), and needs only the outcome: leak, no_tool,
// done, or "" when the session goes on. Its signature is the twin driver's
// judge (sim.Judge), so `sim run` and `repro` classify sessions with one
// classifier: set Workload.Judge = outcome.Classifier{}.Outcome.
func (c Classifier) Outcome(round, toolRounds int, content string, toolCalls int, finish string) string {
	outcome, _ := c.Judge(round, toolRounds, Round{Content: content, ToolCalls: toolCalls, FinishReason: finish})
	return string(outcome)
}

// HasLoop reports an n-gram loop: some run of n words that repeats at least
// reps times in text (a degenerate repetition many corrupted outputs end in).
func HasLoop(text string, n, reps int) bool {
	words := strings.Fields(text)
	if n < 1 || reps < 2 || len(words) < n*reps {
		return false
	}
	if len(words) > 4096 {
		words = words[:4096]
	}
	counts := make(map[string]int, len(words))
	var b strings.Builder
	for i := 0; i+n <= len(words); i++ {
		b.Reset()
		for j := i; j < i+n; j++ {
			b.WriteString(words[j])
			b.WriteByte(' ')
		}
		k := b.String()
		counts[k]++
		if counts[k] >= reps {
			return true
		}
	}
	return false
}
