package sim

import (
	"strings"
	"testing"
)

func TestParseDSMLWellFormed(t *testing.T) {
	calls := []ToolCall{{Name: "get_weather", Params: []Param{
		{Name: "location", String: true, Value: "Paris"},
		{Name: "days_ahead", String: false, Value: "3"},
		{Name: "unit", String: false, Value: `["celsius", true]`},
	}}}
	text := "Let me check.\n" + RenderDSML(calls)
	p := ParseDSML(text)
	if p.Leak || len(p.ToolCalls) != 1 {
		t.Fatalf("parse %q: %+v", text, p)
	}
	if p.Content != "Let me check." {
		t.Errorf("content = %q", p.Content)
	}
	want := `{"location":"Paris","days_ahead":3,"unit":["celsius",true]}`
	if p.ToolCalls[0].Name != "get_weather" || p.ToolCalls[0].Arguments != want {
		t.Errorf("call = %+v, want args %s", p.ToolCalls[0], want)
	}
}

func TestParseDSMLMalformedLeaks(t *testing.T) {
	good := RenderDSML([]ToolCall{{Name: "read_file", Params: []Param{{Name: "path", String: true, Value: "a"}}}})
	cases := map[string]string{
		"unclosed block":     strings.TrimSuffix(good, TagCallsClose),
		"attribute salad":    strings.Replace(good, `string="true">`, `string="false">false">`, 1),
		"repeated closing":   strings.Replace(good, TagInvokeClose, TagInvokeClose+TagInvokeClose, 1),
		"non-JSON value":     strings.Replace(good, `string="true">a`, `string="false">a b`, 1),
		"empty block":        TagCallsOpen + "\n" + TagCallsClose,
		"stray parameter":    TagParamOpen + `x" string="true">1` + TagParamClose,
		"markup in value":    strings.Replace(good, ">a<", ">"+TagInvokeOpen+"<", 1),
		"missing invoke end": strings.Replace(good, TagInvokeClose, "", 1),
	}
	for name, text := range cases {
		p := ParseDSML(text)
		if !p.Leak || len(p.ToolCalls) != 0 {
			t.Errorf("%s: want a leak and no calls, got %+v", name, p)
		}
	}
}

func TestParseDSMLPlainText(t *testing.T) {
	p := ParseDSML("  The weather in Paris is fine.\n")
	if p.Leak || len(p.ToolCalls) != 0 || p.Content != "The weather in Paris is fine." {
		t.Errorf("got %+v", p)
	}
}

func TestVocabRoundTrip(t *testing.T) {
	v := DefaultVocab()
	for _, s := range []string{"", "hello world", RenderDSML([]ToolCall{{Name: "x", Params: []Param{{Name: "y", String: true, Value: "z"}}}}), "üñí©ode 😀", "\x00\xff"} {
		if got := v.Decode(v.Encode(s)); got != s {
			t.Errorf("round trip %q -> %q", s, got)
		}
	}
	toks := v.Encode(TagCallsOpen + TagInvokeOpen)
	if len(toks) != 2 {
		t.Errorf("DSML tags should be one token each, got %d tokens", len(toks))
	}
}
