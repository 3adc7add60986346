package outcome

import (
	"testing"

	"github.com/kvcanary/kvcanary/runtime/hook"
)

// TestClassifierOutcome: Outcome is Judge's outcome for a reply seen as
// content, tool-call count and finish reason, with the same markers.
func TestClassifierOutcome(t *testing.T) {
	for _, tc := range []struct {
		name              string
		c                 Classifier
		round, toolRounds int
		content           string
		toolCalls         int
		finish            string
		want              string
	}{
		{"tool call goes on", Classifier{}, 0, 2, "", 1, "stop", ""},
		{"tool call past the tool rounds goes on", Classifier{}, 3, 2, "", 1, "stop", ""},
		{"text in a tool round", Classifier{}, 1, 2, "I will look it up.", 0, "stop", hook.OutcomeNoTool},
		{"cut in a tool round", Classifier{}, 0, 1, "partial", 0, "length", hook.OutcomeNoTool},
		{"answer after the tools", Classifier{}, 2, 2, "The answer is 4.", 0, "stop", hook.OutcomeDone},
		{"empty answer after the tools", Classifier{}, 1, 1, "", 0, "stop", hook.OutcomeDone},
		{"DSML in content", Classifier{}, 0, 1, "<｜DSML｜function_calls>\n<｜DSML｜invoke name=", 0, "stop", hook.OutcomeLeak},
		{"leak beats a good call", Classifier{}, 0, 1, "x ｜DSML｜ y", 1, "stop", hook.OutcomeLeak},
		{"leak in the answer round", Classifier{}, 1, 1, "<tool_call>{}", 0, "stop", hook.OutcomeLeak},
		{"custom markers replace the defaults", Classifier{Markers: []string{"@@"}}, 0, 1, "｜DSML｜ @@", 1, "stop", hook.OutcomeLeak},
		{"custom markers ignore DSML", Classifier{Markers: []string{"@@"}}, 0, 1, "｜DSML｜", 1, "stop", ""},
	} {
		got := tc.c.Outcome(tc.round, tc.toolRounds, tc.content, tc.toolCalls, tc.finish)
		if got != tc.want {
			t.Errorf("%s: Outcome(%d, %d, %q, %d, %q) = %q, want %q", tc.name, tc.round, tc.toolRounds, tc.content, tc.toolCalls, tc.finish, got, tc.want)
		}
		if want, _ := tc.c.Judge(tc.round, tc.toolRounds, Round{Content: tc.content, ToolCalls: tc.toolCalls, FinishReason: tc.finish}); got != string(want) {
			t.Errorf("%s: Outcome %q differs from Judge %q", tc.name, got, want)
		}
	}
}
