package sim

import (
	"encoding/json"
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

func FuzzParseDSML(f *testing.F) {
	f.Add(RenderDSML([]ToolCall{{Name: "get_weather", Params: []Param{{Name: "location", String: true, Value: "Oslo"}, {Name: "days_ahead", Value: "2"}}}}))
	f.Add("plain text")
	f.Add(TagCallsOpen + TagInvokeOpen + `x">` + TagParamOpen + `p" string="false">false">` + TagParamClose)
	f.Fuzz(func(t *testing.T, text string) {
		p := ParseDSML(text)
		for _, c := range p.ToolCalls {
			if !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("arguments not JSON: %s", c.Arguments)
			}
		}
		if len(p.ToolCalls) > 0 {
			again := ParseDSML(RenderDSML(p.ToolCalls))
			if len(again.ToolCalls) != len(p.ToolCalls) || again.Leak {
				t.Fatalf("re-rendered calls do not parse back: %+v", again)
			}
			for i := range again.ToolCalls {
				if again.ToolCalls[i].Name != p.ToolCalls[i].Name || again.ToolCalls[i].Arguments != p.ToolCalls[i].Arguments {
					t.Fatalf("call %d changed on re-render: %+v vs %+v", i, again.ToolCalls[i], p.ToolCalls[i])
				}
			}
		}
		if got := DefaultVocab().Decode(DefaultVocab().Encode(text)); got != text {
			t.Fatalf("tokenizer round trip changed %q to %q", text, got)
		}
	})
}
