package safetext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscapeJSON(t *testing.T) {
	v := map[string]string{"s": "a\u009b[31mred\u0085 \u202eevil\u202c \u2066iso\u2069 \u200f\u061c \u2028 é ü → ok"}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := EscapeJSON(nil, raw)
	for _, want := range []string{`\u009b`, `\u0085`, `\u202e`, `\u202c`, `\u2066`, `\u2069`, `\u200f`, `\u061c`, `\u2028`, "é ü → ok"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("%s lacks %s", got, want)
		}
	}
	for _, r := range string(got) {
		if r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Errorf("raw %U left in %s", r, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["s"] != v["s"] {
		t.Fatalf("round trip: %v, %q", err, back["s"])
	}
	if plain := []byte(`{"a":"b"}`); string(EscapeJSON(nil, plain)) != string(plain) || NeedsJSONEscape(plain) {
		t.Errorf("plain JSON changed")
	}
}

func FuzzEscapeJSON(f *testing.F) {
	f.Add("x\u009by")
	f.Add("\u202e\u2066")
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		raw, _ := json.Marshal(s)
		got := EscapeJSON(nil, raw)
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != s {
			t.Fatalf("%q: %v %q", s, err, back)
		}
		if NeedsJSONEscape(got) {
			t.Fatalf("%q: escaped output still needs escaping: %s", s, got)
		}
	})
}
