package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// TestDocsFresh: docs/cli (man pages and the Markdown reference) is what
// `make docs` writes from today's commands. On failure run `make docs` and
// commit the result.
func TestDocsFresh(t *testing.T) {
	root := NewCmdRoot(newTestCLI().F)
	dir := t.TempDir()
	if err := genDocs(root, dir); err != nil {
		t.Fatal(err)
	}
	committed := filepath.Join("..", "..", "docs", "cli")
	want, got := readTree(t, committed), readTree(t, dir)
	if len(got) < 30 {
		t.Fatalf("generated only %d files: %v", len(got), keys(got))
	}
	for name, g := range got {
		w, ok := want[name]
		if !ok {
			t.Errorf("docs/cli/%s is missing: run `make docs`", name)
		} else if !bytes.Equal(w, g) {
			t.Errorf("docs/cli/%s is stale: run `make docs`", name)
		}
	}
	for name := range want {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/cli/%s documents no command: run `make docs`", name)
		}
	}
}

// readTree reads every file under dir, keyed by its slash path relative to dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
