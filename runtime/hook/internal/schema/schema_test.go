package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withEvent writes event.go (edited by edit) and WIRE.md into a temporary
// directory, as the generator reads them.
func withEvent(t *testing.T, edit func(string) string) string {
	t.Helper()
	dir := t.TempDir()
	src, err := os.ReadFile("../../event.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../WIRE.md")
	if err != nil {
		t.Fatal(err)
	}
	edited := edit(string(src))
	if edited == string(src) {
		t.Fatal("edit changed nothing")
	}
	for name, b := range map[string][]byte{"event.go": []byte(edited), "WIRE.md": doc} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A field added to a struct with a binary layout but not to its
// //hook:binary line is an error naming the struct and the field.
func TestBinaryLineMustListEveryField(t *testing.T) {
	dir := withEvent(t, func(s string) string {
		return strings.Replace(s, "\tDurNS     int64  `json:\"dur_ns\"", "\tSpec int `json:\"spec,omitempty\"`\n\tDurNS     int64  `json:\"dur_ns\"", 1)
	})
	_, err := Generate(dir)
	if err == nil || !strings.Contains(err.Error(), "Replay") || !strings.Contains(err.Error(), "spec") {
		t.Fatalf("got %v, want an error naming Replay and spec", err)
	}
}

// Adding a Source field is "edit event.go, go generate": the fast path's
// src decoder takes it.
func TestSourceFieldReachesFastPath(t *testing.T) {
	dir := withEvent(t, func(s string) string {
		return strings.Replace(s, "\tPID  int32  `json:\"pid,omitempty\"`\n", "\tPID  int32  `json:\"pid,omitempty\"`\n\tRole string `json:\"role,omitempty\"`\n\tRank int32 `json:\"rank,omitempty\"`\n", 1)
	})
	files, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fast := string(files[FastJSONFile])
	for _, want := range []string{"case \"role\":", "src.Role = s.str()", "case \"rank\":", "src.Rank = s.int32v()"} {
		if !strings.Contains(fast, want) {
			t.Errorf("%s lacks %q", FastJSONFile, want)
		}
	}
}

// A bad check tag names the struct and field.
func TestBadCheckTag(t *testing.T) {
	dir := withEvent(t, func(s string) string {
		return strings.Replace(s, `check:"oneof=graph|eager"`, `check:"among=graph|eager"`, 1)
	})
	_, err := Generate(dir)
	if err == nil || !strings.Contains(err.Error(), "Replay.Mode") {
		t.Fatalf("got %v, want an error naming Replay.Mode", err)
	}
}
