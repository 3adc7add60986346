package hook

import (
	"bytes"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// The JSON slow path's first try: json v2 decodes ~3× faster than
// encoding/json (BENCHMARKS.md, issue 15). It only ever accepts: any error,
// and any event Validate refuses, goes to encoding/json (v1DecodeLine,
// decodeJSONBody), which produces the error, so the reasons and wording
// callers see are unchanged. For that to hold, v2 must decode every line
// both accept into the same event:
//   - names match fields case-insensitively as encoding/json matches them
//     (MatchCaseInsensitiveNames, and MatchCaseSensitiveDelimiter: "ts_ns"
//     does not match "tsns", which v2 alone would allow);
//   - the model's types keep their encoding/json methods (Dec64, Hex64,
//     Float32s, RunConfig, Session), which v2 calls;
//   - findDupKey still runs: v2 rejects a repeated name when it is exact or
//     matches the same field, but two unknown members differing only in case
//     pass it, and WIRE.md refuses them.
var v2Options = jsonv2.JoinOptions(
	jsonv2.MatchCaseInsensitiveNames(true),
	jsonv1.MatchCaseSensitiveDelimiter(true),
)

// envelopeV2 is envelope with the body kept as raw JSON for v2.
type envelopeV2 struct {
	V    int            `json:"v"`
	Kind string         `json:"kind"`
	TS   int64          `json:"ts_ns"`
	Src  *Source        `json:"src,omitempty"`
	Run  string         `json:"run,omitempty"`
	Body jsontext.Value `json:"body"`
}

// v2DecodeLine decodes a valid event line, or reports false.
func v2DecodeLine(line []byte) (Event, bool) {
	var env envelopeV2
	if jsonv2.Unmarshal(line, &env, v2Options) != nil || env.V != Version {
		return Event{}, false
	}
	if _, _, dup := findDupKey(line); dup {
		return Event{}, false
	}
	k, err := ParseKind(env.Kind)
	if err != nil {
		return Event{}, false
	}
	body, ok := v2DecodeBody(k, env.Body, false)
	if !ok || validateBody(body) != nil {
		return Event{}, false
	}
	ev := Event{Kind: k, TS: env.TS, Run: env.Run, Body: body}
	if env.Src != nil {
		ev.Src = *env.Src
	}
	return ev, true
}

// v2DecodeBody decodes a kind's body object (values unchecked), or reports
// false; with checkDups it also refuses what findDupKey finds.
func v2DecodeBody(k Kind, b []byte, checkDups bool) (Body, bool) {
	if t := bytes.TrimSpace(b); len(t) == 0 || string(t) == "null" {
		return nil, false
	}
	body, err := NewBody(k)
	if err != nil || jsonv2.Unmarshal(b, body, v2Options) != nil {
		return nil, false
	}
	if checkDups {
		if _, _, dup := findDupKey(b); dup {
			return nil, false
		}
	}
	return body, true
}
