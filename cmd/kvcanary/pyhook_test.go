package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/pyhook"
)

func TestPyhookPathFlags(t *testing.T) {
	wantOptions(t, NewCmdPyhookPath, []string{"--cache-dir", "/x", "--json"}, func(o *PyhookPathOptions) bool {
		return o.CacheDir == "/x" && o.JSON.JSON
	})
}

func TestPyhookPathPrintsExtractedDir(t *testing.T) {
	cache := t.TempDir()
	c := newTestCLI()
	if err := c.exec(NewCmdRoot(c.F), "pyhook", "path", "--cache-dir", cache); err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSuffix(c.Out.String(), "\n")
	if filepath.Dir(dir) != cache || strings.Contains(dir, "\n") {
		t.Fatalf("printed %q, want one line: a directory in %s", c.Out.String(), cache)
	}
	for _, f := range []string{"kvcanary/__init__.py", "sitecustomize.py"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("extracted dir lacks %s: %v", f, err)
		}
	}

	ios, _, out, _ := cmdutil.Test()
	if err := pyhookPathRun(&PyhookPathOptions{IO: ios, JSON: &cmdutil.JSONFlags{JSON: true}, CacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	var j PyhookPathJSON
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	v, _ := pyhook.Version()
	pv, _ := pyhook.PackageVersion()
	if j.Path != dir || j.Version != v || j.PackageVersion != pv || pv == "" || j.Files < 3 {
		t.Fatalf("json %+v, want path %s version %s package %s", j, dir, v, pv)
	}
}

func TestPyhookPathUnwritable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, _, _ := cmdutil.Test()
	err := pyhookPathRun(&PyhookPathOptions{IO: ios, JSON: &cmdutil.JSONFlags{}, CacheDir: filepath.Join(file, "c")})
	if cmdutil.ExitCode(err) != cmdutil.ExitInput || !strings.Contains(err.Error(), file) {
		t.Fatalf("err %v (exit %d), want exit 3 naming %s", err, cmdutil.ExitCode(err), file)
	}
}
