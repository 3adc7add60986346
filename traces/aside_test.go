package traces

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSetAside: an existing bundle moves to a name with its time, a second
// one with the same time gets a counter, and the bytes are the bundle's;
// nothing at the path, or an empty file, is left as it is.
func TestSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "collect.kvtrace")
	if kept, err := SetAside(path); err != nil || kept != "" {
		t.Fatalf("nothing there: %q %v", kept, err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := SetAside(path); err != nil || kept != "" {
		t.Fatalf("empty file: %q %v", kept, err)
	}
	at := time.Date(2026, 12, 1, 16, 14, 0, 0, time.UTC)
	var kept []string
	for i, body := range []string{"first run", "second run"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		k, err := SetAside(path)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"collect-20261201T161400Z.kvtrace", "collect-20261201T161400Z-1.kvtrace"}[i]
		if k != filepath.Join(dir, want) {
			t.Errorf("run %d kept as %q, want %s", i, k, want)
		}
		if b, err := os.ReadFile(k); err != nil || string(b) != body {
			t.Errorf("run %d: %q %v", i, b, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("run %d: %s still there (%v)", i, path, err)
		}
		kept = append(kept, k)
	}
	if kept[0] == kept[1] {
		t.Error("the second run replaced the first")
	}
}
