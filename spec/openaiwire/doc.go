// Package openaiwire holds the OpenAI chat-completions wire types kvcanary
// speaks on both ends: the twin's OpenAI server (runtime/sim/server) writes
// them and reads requests into them, the repro harness reads answers and
// streamed chunks into them. One set of types, so the two ends cannot drift.
//
// It is a spec leaf: types and JSON tags only, no behaviour, no kvcanary
// imports. Field tags are part of the contract: omitempty marks exactly the
// fields the twin leaves out when empty, so the twin's bytes stay as they
// were.
package openaiwire
