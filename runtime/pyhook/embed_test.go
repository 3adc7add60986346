package pyhook

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
)

func TestEmbeddedLayout(t *testing.T) {
	files, err := Files()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
		for _, part := range strings.Split(f.Path, "/") {
			if part == "__pycache__" || part == "tests" || strings.HasPrefix(part, ".") {
				t.Errorf("%s extracted: caches, tests and dot files stay out", f.Path)
			}
		}
		if strings.HasSuffix(f.Path, ".pyc") {
			t.Errorf("%s extracted: byte code stays out", f.Path)
		}
		if strings.HasPrefix(f.Path, "sitecustomize/") {
			t.Errorf("%s not flattened to the top", f.Path)
		}
	}
	for _, want := range []string{"kvcanary/__init__.py", "sitecustomize.py", "pyproject.toml"} {
		if !have[want] {
			t.Errorf("%s missing from the extracted layout %v", want, have)
		}
	}
	v, err := Version()
	if err != nil || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(v) {
		t.Fatalf("Version() = %q, %v; want 64 hex digits", v, err)
	}
	pv, err := PackageVersion()
	if err != nil || !regexp.MustCompile(`^\d+\.\d+`).MatchString(pv) {
		t.Fatalf("PackageVersion() = %q, %v; want kvcanary/__init__.py's __version__", pv, err)
	}
}

func TestNewTreeSkipsCachesAndFlattens(t *testing.T) {
	tr, err := newTree(fstest.MapFS{
		"kvcanary/__init__.py":                      {Data: []byte("x")},
		"kvcanary/__pycache__/__init__.cpython.pyc": {Data: []byte("pyc")},
		"kvcanary/sglang/hooks.py":                  {Data: []byte("h")},
		"kvcanary/stray.pyc":                        {Data: []byte("pyc")},
		"kvcanary/.swp":                             {Data: []byte("editor")},
		"kvcanary/tests/test_x.py":                  {Data: []byte("t")},
		"sitecustomize/sitecustomize.py":            {Data: []byte("s")},
		"pyproject.toml":                            {Data: []byte("p")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range tr.files {
		got = append(got, f.Path)
	}
	if want := "kvcanary/__init__.py kvcanary/sglang/hooks.py pyproject.toml sitecustomize.py"; strings.Join(got, " ") != want {
		t.Fatalf("layout %v, want %s", got, want)
	}
	_, err = newTree(fstest.MapFS{"sitecustomize/a/x.py": {Data: []byte("1")}, "sitecustomize/b/x.py": {Data: []byte("2")}})
	if err == nil || !strings.Contains(err.Error(), "both extract to x.py") {
		t.Fatalf("colliding flattened names: %v", err)
	}
}

func mustTree(t *testing.T, content string) *tree {
	t.Helper()
	tr, err := newTree(fstest.MapFS{
		"kvcanary/__init__.py":           {Data: []byte(content)},
		"kvcanary/emitter.py":            {Data: []byte("class Emitter: pass\n")},
		"sitecustomize/sitecustomize.py": {Data: []byte("# site\n")},
		"pyproject.toml":                 {Data: []byte("[project]\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func checkExtracted(t *testing.T, tr *tree, dir string) {
	t.Helper()
	for _, f := range tr.files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || string(b) != string(f.Data) {
			t.Fatalf("%s in %s: %q, %v; want %q", f.Path, dir, b, err, f.Data)
		}
	}
}

func stat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func TestExtractIsIdempotent(t *testing.T) {
	root := t.TempDir()
	tr := mustTree(t, "__version__ = '1'\n")
	dir, err := tr.extract(root)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != root || filepath.Base(dir) != "pyhook-"+tr.version[:16] {
		t.Fatalf("extracted to %s, want %s/pyhook-%s", dir, root, tr.version[:16])
	}
	checkExtracted(t, tr, dir)
	if m := stat(t, dir).Mode().Perm(); m != 0o755 {
		t.Errorf("directory mode %v, want 0755", m)
	}
	before := stat(t, filepath.Join(dir, "kvcanary", "emitter.py"))
	// Python writes byte code beside the sources: that is no damage.
	if err := os.MkdirAll(filepath.Join(dir, "kvcanary", "__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kvcanary", "__pycache__", "emitter.cpython-311.pyc"), []byte("pyc"), 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := tr.extract(root)
	if err != nil || again != dir {
		t.Fatalf("second extract: %s, %v; want %s", again, err, dir)
	}
	if !os.SameFile(before, stat(t, filepath.Join(dir, "kvcanary", "emitter.py"))) {
		t.Fatal("an intact extraction was rewritten")
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") || strings.Contains(e.Name(), ".damaged-") {
			t.Errorf("leftover %s in the cache", e.Name())
		}
	}
}

func TestExtractIsVersioned(t *testing.T) {
	root := t.TempDir()
	a, b := mustTree(t, "__version__ = '1'\n"), mustTree(t, "__version__ = '2'\n")
	if a.version == b.version {
		t.Fatal("different contents, same version")
	}
	da, err := a.extract(root)
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.extract(root)
	if err != nil {
		t.Fatal(err)
	}
	if da == db {
		t.Fatalf("both versions extracted to %s", da)
	}
	checkExtracted(t, a, da)
	checkExtracted(t, b, db)
	// A path change alone changes the version too.
	c, err := newTree(fstest.MapFS{"kvcanary/x.py": {Data: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newTree(fstest.MapFS{"kvcanary/y.py": {Data: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	if c.version == d.version {
		t.Fatal("renamed file, same version")
	}
}

func TestExtractRedoesDamagedDir(t *testing.T) {
	for name, damage := range map[string]func(dir string) error{
		"file deleted":   func(dir string) error { return os.Remove(filepath.Join(dir, "kvcanary", "emitter.py")) },
		"file truncated": func(dir string) error { return os.WriteFile(filepath.Join(dir, "sitecustomize.py"), nil, 0o644) },
		"file edited": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "kvcanary", "__init__.py"), []byte("__version__ = 'x'\n"), 0o644)
		},
		"no marker (partial copy)": func(dir string) error { return os.Remove(filepath.Join(dir, markerName)) },
		"marker of another version": func(dir string) error {
			return os.WriteFile(filepath.Join(dir, markerName), []byte("00\n"), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			tr := mustTree(t, "__version__ = '1'\n")
			dir, err := tr.extract(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := damage(dir); err != nil {
				t.Fatal(err)
			}
			if tr.intact(dir) {
				t.Fatal("damage not detected")
			}
			again, err := tr.extract(root)
			if err != nil || again != dir {
				t.Fatalf("re-extract: %s, %v", again, err)
			}
			checkExtracted(t, tr, dir)
			if !tr.intact(dir) {
				t.Fatal("not intact after re-extraction")
			}
			ents, _ := os.ReadDir(root)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					t.Errorf("leftover %s in the cache", e.Name())
				}
			}
		})
	}
}

func TestExtractRemovesCrashLeftovers(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock: leftovers are kept where extractors cannot be told apart")
	}
	root := t.TempDir()
	tr := mustTree(t, "v")
	stale := filepath.Join(root, "."+tr.dirName()+".tmp-123")
	if err := os.MkdirAll(filepath.Join(stale, "kvcanary"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.extract(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("crashed extractor's %s still there: %v", stale, err)
	}
}

func TestExtractConcurrent(t *testing.T) {
	root := t.TempDir()
	tr := mustTree(t, "__version__ = '1'\n")
	const n = 8
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = tr.extract(root)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || dirs[i] != dirs[0] {
			t.Fatalf("extractor %d: %s, %v; extractor 0: %s", i, dirs[i], errs[i], dirs[0])
		}
	}
	checkExtracted(t, tr, dirs[0])
	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "pyhook-"+tr.version[:16]+" pyhook.lock" {
		t.Fatalf("cache holds %v; want the one directory and the lock", names)
	}
}

func TestExtractErrorNamesPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(root, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := mustTree(t, "v").extract(filepath.Join(root, "sub"))
	if err == nil || !strings.Contains(err.Error(), root) {
		t.Fatalf("cache under a file: %v; want an error naming %s", err, root)
	}
}

// The extracted directory works as a PYTHONPATH entry: python imports the
// package from it and runs its sitecustomize at start-up.
func TestExtractedPackageImports(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("%s not installed: %v", py, err)
	}
	dir, err := Extract(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", "import sys, kvcanary; print(kvcanary.__file__); print(sys.modules['sitecustomize'].__file__)")
	cmd.Dir = t.TempDir() // not this directory: the sources here would shadow the extracted copy
	cmd.Env = []string{"PYTHONPATH=" + dir, "PYTHONDONTWRITEBYTECODE=1", "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{filepath.Join(dir, "kvcanary", "__init__.py"), filepath.Join(dir, "sitecustomize.py")}
	if len(lines) < 2 || lines[len(lines)-2] != want[0] || lines[len(lines)-1] != want[1] {
		t.Fatalf("python imported %q, want %q", lines, want)
	}
}

// BenchmarkExtractIntact is what every wrap and pyhook path pays once the
// package is extracted: the byte-for-byte check of the cached copy.
func BenchmarkExtractIntact(b *testing.B) {
	root := b.TempDir()
	if _, err := Extract(root); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Extract(root); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExtractFresh is the first run of a new version: write the files
// into a temporary directory and rename it into place.
func BenchmarkExtractFresh(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		root := b.TempDir()
		b.StartTimer()
		if _, err := Extract(root); err != nil {
			b.Fatal(err)
		}
	}
}
