package traces

import (
	"os"
	"path/filepath"
	"strings"
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

// TestSetAsideLeavesWhatIsNotABundleFile: a symlink (to a bundle or to
// /dev/stdout) and a device are not moved; a dotfile keeps its whole name;
// a bundle in a directory it cannot be moved in is an error naming it.
func TestSetAsideLeavesWhatIsNotABundleFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.kvtrace")
	if err := os.WriteFile(target, []byte("run"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.kvtrace")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, os.DevNull} {
		if kept, err := SetAside(p); err != nil || kept != "" {
			t.Errorf("%s: kept %q, %v; want it left alone", p, kept, err)
		}
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was moved or replaced: %v %v", fi, err)
	}
	dot := filepath.Join(dir, ".kvtrace")
	if err := os.WriteFile(dot, []byte("run"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kept, err := SetAside(dot); err != nil || !strings.HasPrefix(filepath.Base(kept), ".kvtrace-") {
		t.Errorf("dotfile kept as %q, %v", kept, err)
	}
	if os.Geteuid() == 0 {
		t.Log("root: a read-only directory does not stop root; the refusal is not exercised")
		return
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o700)
	held := filepath.Join(ro, "collect.kvtrace")
	os.WriteFile(held, []byte("run"), 0o600)
	os.Chmod(ro, 0o500)
	defer os.Chmod(ro, 0o700)
	if _, err := SetAside(held); err == nil || !strings.Contains(err.Error(), "cannot be kept") {
		t.Errorf("read-only directory: %v", err)
	}
}
