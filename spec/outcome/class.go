package outcome

import "fmt"

// Class is a session's outcome class. Its values are the strings of the
// session event's outcome field (hook.Outcome*).
type Class string

// The outcome classes, the fixed set.
const (
	Done      Class = "done"      // the session finished with a plain-text answer
	MaxRounds Class = "maxrounds" // the session ran out of rounds while still calling tools
	Leak      Class = "leak"      // tool-call markup in content or reasoning_content: corrupted
	NoTool    Class = "no_tool"   // a round that had to call a tool did not: corrupted
	Error     Class = "error"     // transport, status, or format failure: corrupted
	Timeout   Class = "timeout"   // the per-request timeout passed: not counted as corruption
)

// Classes lists the outcome classes in report order.
func Classes() []Class { return []Class{Done, MaxRounds, Leak, NoTool, Error, Timeout} }

// Valid reports whether c is one of the classes.
func (c Class) Valid() bool {
	switch c {
	case Done, MaxRounds, Leak, NoTool, Error, Timeout:
		return true
	}
	return false
}

// ParseClass returns the class named s, or an error naming s.
func ParseClass(s string) (Class, error) {
	if c := Class(s); c.Valid() {
		return c, nil
	}
	return "", fmt.Errorf("parse outcome %q: want done, maxrounds, leak, no_tool, error or timeout", s)
}
