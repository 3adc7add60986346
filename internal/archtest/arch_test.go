package archtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is kvcanary's module path.
const module = "github.com/kvcanary/kvcanary"

// Layer is where a package sits in the one-way rule of DESIGN.md:
//
//	composition (cmd, demo) → sinks → analyzers → specs, runtime/hook
//	sources → specs, runtime/hook
//
// Utilities are leaves any layer may use.
type Layer string

const (
	Spec        Layer = "spec"        // spec leaves: layouts, digests, page diff, wire types, outcome rules
	Hook        Layer = "hook"        // runtime/hook: the event model, bus and wire protocol
	Utility     Layer = "utility"     // internal leaf utilities (quoting, CPU time, input files, build info)
	Source      Layer = "source"      // observes: the twin, engine hooks, the repro harness, log scans, probes
	Analyzer    Layer = "analyzer"    // judges: checksum, canary, graphdiff, sessions
	Sink        Layer = "sink"        // shows and keeps: tui, traces and the coming metrics/report/export packages
	CLI         Layer = "cli"         // internal/cmdutil: the CLI's own helpers
	Composition Layer = "composition" // wires everything: cmd, demo, the analyzer registry
)

// layerOf places every kvcanary package (its path inside the module). A
// package missing here fails the test: a new package must say where it sits.
func layerOf(rel string) (Layer, bool) {
	under := func(p string) bool { return rel == p || strings.HasPrefix(rel, p+"/") }
	switch {
	case under("spec"):
		return Spec, true
	case rel == "runtime/hook":
		return Hook, true
	case under("runtime"), rel == "repro":
		return Source, true
	case rel == "checksum", rel == "canary", rel == "graphdiff", rel == "sessions":
		return Analyzer, true
	case under("tui"), under("traces"), under("metrics"), under("sinks"), under("report"), under("perfetto"), under("otlp"),
		// The analyzer set (analyzers.All) imports the analyzers as a
		// sink may; sinks that re-judge bundles (report) instantiate it.
		rel == "internal/analyzers":
		return Sink, true
	case rel == "internal/safetext", rel == "internal/cputime", rel == "internal/input", rel == "internal/buildinfo",
		rel == "internal/archtest", rel == "internal/pki", rel == "internal/testenv", rel == "internal/outfile":
		return Utility, true
	case rel == "internal/cmdutil":
		return CLI, true
	case under("cmd"), rel == "demo",
		// bisect runs sources (the twin, servers and the harness) and
		// judges them (sessions): composition, like demo. deploy holds
		// only the recipes' tests, which check them against the sinks.
		rel == "bisect", rel == "deploy",
		// The pipeline (issue 15.1) wires a source, the bus, the recorder,
		// analyzers and live views for the commands: composition.
		under("pipeline"):
		return Composition, true
	}
	return "", false
}

// mayImport lists, per layer, the kvcanary layers its packages may import.
// The standard library and third-party modules are always allowed (the
// one-entry rule for third parties is thirdParty below).
var mayImport = map[Layer][]Layer{
	Spec:        {Spec, Hook, Utility},
	Hook:        {Utility},
	Utility:     {Utility},
	Source:      {Spec, Hook, Utility},
	Analyzer:    {Spec, Hook, Utility},
	Sink:        {Analyzer, Sink, Spec, Hook, Utility},
	CLI:         {Utility},
	Composition: {Composition, Sink, Analyzer, Source, Spec, Hook, Utility, CLI},
}

// exception is a known leak the rule tolerates until someone removes it:
// an import (pkg imports imp) or, with file set, a source living in a sink
// package's file (see bundleSources).
type exception struct {
	pkg, imp string // module-relative paths
	file     string // a file of pkg, for a source in a sink
	why      string
}

// exceptions are the known leaks. Each must still exist: a stale entry
// fails the test so the list stays honest.
var exceptions = []exception{}

// thirdParty lets each third-party library in through one package
// (STYLE.md): module path prefix → the packages that may import it. The
// longest matching prefix decides. The rule covers test files too (a test
// imports a library only where the library enters: deploy's tests read the
// recipes' YAML, tui's drive teatest).
var thirdParty = map[string][]string{
	"github.com/charmbracelet/":          {"tui"},
	"github.com/muesli/termenv":          {"tui"},
	"github.com/NVIDIA/go-nvml":          {"runtime/gpu"},
	"github.com/cilium/ebpf":             {"runtime/cudaprobe"},
	"github.com/klauspost/":              {"traces"},
	"github.com/zeebo/xxh3":              {"spec/kvlayout"},
	"github.com/spf13/":                  {"cmd/kvcanary", "internal/cmdutil"},
	"github.com/spf13/cobra/doc":         {"cmd/kvcanary"}, // gen-docs: man pages and Markdown
	"github.com/cpuguy83/go-md2man":      {"cmd/kvcanary"}, // cobra/doc's man renderer, should it be used directly
	"github.com/BurntSushi/toml":         {"bisect"},
	"github.com/prometheus/":             {"metrics"},
	"go.opentelemetry.io/":               {"otlp"},
	"google.golang.org/protobuf":         {"otlp"},
	"gonum.org/v1/plot":                  {"report"},
	"github.com/go-json-experiment/json": {"runtime/hook"},
	"go.yaml.in/yaml":                    {"deploy"},
}

// pkg is one package and its imports, from every .go file in its
// directory whatever its build constraints.
type pkg struct {
	Path    string // module-relative
	Imports []string
	// TestImports are its _test.go files' imports: checked by the
	// third-party rule only (a test may drive any layer, e.g. the twin).
	TestImports []string
	// Feeders are its non-test files that import traces and export a
	// function taking a hook.Publisher: they read bundles and publish
	// events, which makes them sources whatever package they are in.
	Feeders []string
}

// violation is one import that breaks the rule.
type violation struct {
	pkg, imp, msg string
}

// check applies the rule to pkgs and returns every violation, in input
// order, plus the exceptions no package needed.
func check(pkgs []pkg) (vs []violation, stale []exception) {
	used := make([]bool, len(exceptions))
	for _, p := range pkgs {
		from, ok := layerOf(p.Path)
		if !ok {
			vs = append(vs, violation{p.Path, "", fmt.Sprintf("package %s has no layer: add it to layerOf in internal/archtest (spec, source, analyzer, sink or composition)", p.Path)})
			continue
		}
		for _, imp := range p.TestImports {
			if allowed := thirdPartyImporters(imp); allowed != nil && !slices.Contains(allowed, p.Path) {
				vs = append(vs, violation{p.Path, imp, fmt.Sprintf("%s imports %s in a test: that library enters kvcanary only through %s (STYLE.md)",
					p.Path, imp, strings.Join(allowed, ", "))})
			}
		}
		for _, imp := range p.Imports {
			rel, internal := strings.CutPrefix(imp, module+"/")
			if !internal {
				if allowed := thirdPartyImporters(imp); allowed != nil && !slices.Contains(allowed, p.Path) {
					vs = append(vs, violation{p.Path, imp, fmt.Sprintf("%s imports %s: that library enters kvcanary only through %s (STYLE.md)",
						p.Path, imp, strings.Join(allowed, ", "))})
				}
				continue
			}
			to, ok := layerOf(rel)
			if !ok {
				vs = append(vs, violation{p.Path, rel, fmt.Sprintf("%s imports %s, which has no layer: add it to layerOf in internal/archtest", p.Path, rel)})
				continue
			}
			if allowedImport(from, p.Path, to, rel) {
				continue
			}
			if i := slices.IndexFunc(exceptions, func(e exception) bool { return e.file == "" && e.pkg == p.Path && e.imp == rel }); i >= 0 {
				used[i] = true
				continue
			}
			vs = append(vs, violation{p.Path, rel, fmt.Sprintf("%s (%s) imports %s (%s): a %s may import only %s",
				p.Path, from, rel, to, from, layerList(mayImport[from]))})
		}
		if from == Source || from == Composition {
			continue // a source may publish what it reads; composition wires sources
		}
		for _, f := range p.Feeders {
			if i := slices.IndexFunc(exceptions, func(e exception) bool { return e.pkg == p.Path && e.file == f }); i >= 0 {
				used[i] = true
				continue
			}
			vs = append(vs, violation{p.Path, "traces", fmt.Sprintf("%s/%s (%s) reads bundles and publishes their events (imports traces, exports a func taking hook.Publisher): "+
				"that is a source; move it to a source or the pipeline", p.Path, f, from)})
		}
	}
	for i, e := range exceptions {
		if !used[i] {
			stale = append(stale, e)
		}
	}
	return vs, stale
}

// allowedImport reports whether a package of layer from at fromPath may
// import one of layer to at toPath. Inside one source (runtime/sim and
// runtime/sim/server, runtime/gpu and its fake) packages may use each
// other; one source never imports another.
func allowedImport(from Layer, fromPath string, to Layer, toPath string) bool {
	if slices.Contains(mayImport[from], to) {
		return true
	}
	return from == Source && to == Source && sourceRoot(fromPath) == sourceRoot(toPath)
}

// sourceRoot is the source a package belongs to: runtime/<name> or repro.
func sourceRoot(rel string) string {
	if parts := strings.SplitN(rel, "/", 3); len(parts) >= 2 && parts[0] == "runtime" {
		return path.Join(parts[0], parts[1])
	}
	return rel
}

// thirdPartyImporters returns the packages through which the library imp
// may enter (the entry of the longest matching prefix), or nil when it is
// not ruled.
func thirdPartyImporters(imp string) []string {
	best := ""
	for prefix := range thirdParty {
		if strings.HasPrefix(imp, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	if best == "" {
		return nil
	}
	return thirdParty[best]
}

func layerList(ls []Layer) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = string(l)
	}
	return strings.Join(s, ", ") + " (and the standard library and third-party modules)"
}

// moduleRoot is the directory of kvcanary's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH (%v): cannot list the module's packages", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v: run the test inside the module", gomod, err)
	}
	return filepath.Dir(gomod)
}

// listPackages lists the packages of the module rooted at root: those `go
// list` finds, plus directories it skips because build constraints exclude
// all their files for this platform. Each package's imports come from
// parsing every .go file in its directory (go list sees only the files of
// this OS, architecture and build tags, so a leak in a `//go:build !linux`
// file would pass).
func listPackages(t *testing.T, root string) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not on PATH (%v): cannot list the module's packages", err)
	}
	cmd := exec.Command(goBin, "list", "-e", "-f", `{{.ImportPath}} {{.Dir}}{{if .Error}} ERROR:{{.Error}}{{end}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v\n%s", module, err, stderr.Bytes())
	}
	dirs := map[string]string{} // directory → module-relative package path
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, " ERROR:"); i >= 0 {
			t.Fatalf("go list: %s", line[i+len(" ERROR:"):])
		}
		path, dir, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if rel, ok := strings.CutPrefix(path, module+"/"); ok {
			dirs[filepath.Clean(dir)] = rel
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Directories with .go files go list did not name: every file excluded
	// on this platform.
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
			return filepath.SkipDir
		}
		if p != root {
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
		}
		if _, ok := dirs[p]; ok || p == root {
			return nil
		}
		if files, _ := filepath.Glob(filepath.Join(p, "*.go")); len(files) > 0 {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			dirs[p] = filepath.ToSlash(rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	var pkgs []pkg
	for _, dir := range slices.Sorted(maps.Keys(dirs)) {
		p, err := parseDir(dir, dirs[dir])
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal(errors.New("go list found no packages"))
	}
	return pkgs
}

// parseDir reads the imports of every .go file in dir, whatever its build
// constraints: non-test files' into Imports (and Feeders), _test.go files'
// into TestImports.
func parseDir(dir, rel string) (pkg, error) {
	p := pkg{Path: rel}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return p, err
	}
	imps, tests := map[string]bool{}, map[string]bool{}
	for _, file := range files {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			return p, fmt.Errorf("parse %s: %w", file, err)
		}
		isTest := strings.HasSuffix(file, "_test.go")
		into := imps
		if isTest {
			into = tests
		}
		for _, im := range f.Imports {
			ip, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return p, fmt.Errorf("%s: import %s: %w", file, im.Path.Value, err)
			}
			if ip != "C" {
				into[ip] = true
			}
		}
		if isTest {
			continue
		}
		feeds, err := feedsPublisher(file)
		if err != nil {
			return p, err
		}
		if feeds {
			p.Feeders = append(p.Feeders, filepath.Base(file))
		}
	}
	p.Imports, p.TestImports = slices.Sorted(maps.Keys(imps)), slices.Sorted(maps.Keys(tests))
	return p, nil
}

// feedsPublisher reports whether the Go file at path imports traces and
// exports a function with a hook.Publisher parameter.
func feedsPublisher(path string) (bool, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return false, fmt.Errorf("parse %s: %w", path, err)
	}
	hookName, tracesName := "", ""
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := path0(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		switch p {
		case module + "/runtime/hook":
			hookName = name
		case module + "/traces":
			tracesName = name
		}
	}
	if hookName == "" || tracesName == "" {
		return false, nil
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !fn.Name.IsExported() {
			continue
		}
		for _, fld := range fn.Type.Params.List {
			if sel, ok := fld.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Publisher" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == hookName {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

func path0(importPath string) string { return path.Base(importPath) }

// TestImportRule checks the whole module.
func TestImportRule(t *testing.T) {
	pkgs := listPackages(t, moduleRoot(t))
	vs, stale := check(pkgs)
	for _, v := range vs {
		t.Error(v.msg)
	}
	for _, e := range stale {
		if e.file != "" {
			t.Errorf("stale exception: %s/%s no longer feeds a publisher from bundles; delete its entry from exceptions in internal/archtest", e.pkg, e.file)
			continue
		}
		t.Errorf("stale exception: %s no longer imports %s; delete its entry from exceptions in internal/archtest", e.pkg, e.imp)
	}
	// The layers the rule is about must be present, or the test checks
	// nothing (e.g. run from outside the module).
	seen := map[Layer]bool{}
	for _, p := range pkgs {
		l, _ := layerOf(p.Path)
		seen[l] = true
	}
	for _, l := range []Layer{Spec, Hook, Source, Analyzer, Sink, Composition} {
		if !seen[l] {
			t.Errorf("no %s package found among %d packages", l, len(pkgs))
		}
	}
}

// TestImportRuleCatchesLeaks plants the leaks issue 15 found (and others)
// in a fixture and checks each fails with a message naming the package and
// the import.
func TestImportRuleCatchesLeaks(t *testing.T) {
	cases := []struct {
		pkg  pkg
		want string
	}{
		{pkg{Path: "runtime/sim", Imports: []string{module + "/spec/kvlayout", module + "/canary"}},
			"runtime/sim (source) imports canary (analyzer): a source may import only spec, hook, utility"},
		{pkg{Path: "runtime/sim", Imports: []string{module + "/checksum"}}, "runtime/sim (source) imports checksum (analyzer)"},
		{pkg{Path: "repro", Imports: []string{module + "/sessions"}}, "repro (source) imports sessions (analyzer)"},
		{pkg{Path: "runtime/sim/server", Imports: []string{module + "/repro"}}, "runtime/sim/server (source) imports repro (source)"},
		{pkg{Path: "tui", Imports: []string{module + "/internal/cmdutil"}}, "tui (sink) imports internal/cmdutil (cli)"},
		{pkg{Path: "canary", Imports: []string{module + "/tui"}}, "canary (analyzer) imports tui (sink)"},
		{pkg{Path: "sessions", Imports: []string{module + "/repro"}}, "sessions (analyzer) imports repro (source)"},
		{pkg{Path: "spec/pagediff", Imports: []string{module + "/canary"}}, "spec/pagediff (spec) imports canary (analyzer)"},
		{pkg{Path: "traces", Imports: []string{module + "/runtime/sim"}}, "traces (sink) imports runtime/sim (source)"},
		{pkg{Path: "cmd/kvcanary", Imports: []string{"github.com/zeebo/xxh3"}}, "cmd/kvcanary imports github.com/zeebo/xxh3: that library enters kvcanary only through spec/kvlayout"},
		{pkg{Path: "tui", Imports: []string{"gonum.org/v1/plot/plotter"}}, "tui imports gonum.org/v1/plot/plotter: that library enters kvcanary only through report"},
		{pkg{Path: "traces", Imports: []string{"github.com/go-json-experiment/json/jsontext"}}, "enters kvcanary only through runtime/hook"},
		{pkg{Path: "internal/cmdutil", Imports: []string{"github.com/spf13/cobra/doc"}}, "enters kvcanary only through cmd/kvcanary ("},
		{pkg{Path: "metrics", TestImports: []string{"go.yaml.in/yaml/v3"}}, "metrics imports go.yaml.in/yaml/v3 in a test: that library enters kvcanary only through deploy"},
		{pkg{Path: "newthing", Imports: nil}, "package newthing has no layer"},
		{pkg{Path: "tui", Imports: []string{module + "/newthing"}}, "tui imports newthing, which has no layer"},
	}
	for _, tc := range cases {
		vs, _ := check([]pkg{tc.pkg})
		if len(vs) != 1 || !strings.Contains(vs[0].msg, tc.want) {
			t.Errorf("%s importing %v: violations %+v, want one containing %q", tc.pkg.Path, tc.pkg.Imports, vs, tc.want)
		}
	}
	// What the rule allows stays allowed.
	for _, p := range []pkg{
		{Path: "runtime/sim", Imports: []string{module + "/spec/kvlayout", module + "/spec/pagediff", module + "/runtime/hook", "fmt"}},
		{Path: "runtime/sim/server", Imports: []string{module + "/runtime/sim", module + "/spec/openaiwire"}},
		{Path: "sessions", Imports: []string{module + "/spec/outcome", module + "/internal/safetext"}},
		{Path: "tui", Imports: []string{module + "/canary", module + "/sessions", "github.com/charmbracelet/bubbletea"}},
		{Path: "cmd/kvcanary", Imports: []string{module + "/repro", module + "/tui", module + "/internal/cmdutil", "github.com/spf13/cobra/doc"}},
		{Path: "internal/cmdutil", Imports: []string{"github.com/spf13/cobra", "github.com/spf13/pflag"}},
		{Path: "deploy", TestImports: []string{"go.yaml.in/yaml/v3"}},
		{Path: "report", Imports: []string{"gonum.org/v1/plot/vg"}},
	} {
		if vs, _ := check([]pkg{p}); len(vs) != 0 {
			t.Errorf("%s importing %v: unexpected violations %+v", p.Path, p.Imports, vs)
		}
	}
	// A sink file that reads bundles and feeds a publisher is a source.
	if vs, _ := check([]pkg{{Path: "tui", Imports: []string{module + "/traces"}, Feeders: []string{"wire.go"}}}); len(vs) != 1 ||
		!strings.Contains(vs[0].msg, "tui/wire.go (sink) reads bundles and publishes their events") {
		t.Errorf("a bundle source in tui: violations %+v", vs)
	}
	// A known exception is tolerated, and reported stale once gone.
	saved := exceptions
	defer func() { exceptions = saved }()
	exceptions = []exception{{pkg: "tui", imp: "traces", file: "replay.go", why: "a known leak, for this test"}}
	if vs, stale := check([]pkg{{Path: "tui", Imports: []string{module + "/traces"}, Feeders: []string{"replay.go"}}}); len(vs) != 0 || len(stale) != 0 {
		t.Errorf("tui/replay.go: violations %+v, stale %+v", vs, stale)
	}
	if _, stale := check([]pkg{{Path: "tui", Imports: []string{module + "/traces"}}}); len(stale) != 1 || stale[0].file != "replay.go" {
		t.Errorf("unused exception not reported stale: %+v", stale)
	}
}

// TestListingSeesEveryFile plants leaks where `go list` does not look: a
// file for another OS, and a package whose every file is for another OS.
func TestListingSeesEveryFile(t *testing.T) {
	root := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module "+module+"\n\ngo 1.22\n")
	write("canary/canary.go", "package canary\n")
	write("runtime/sim/sim.go", "package sim\n")
	write("runtime/sim/leak_other.go", "//go:build !linux\n\npackage sim\n\nimport _ \""+module+"/canary\"\n")
	write("runtime/sim/leak_linux.go", "//go:build linux\n\npackage sim\n\nimport _ \""+module+"/checksum\"\n")
	write("checksum/checksum.go", "package checksum\n")
	write("repro/repro_windows.go", "package repro\n\nimport _ \""+module+"/checksum\"\n")
	write("tui/tui_test.go", "package tui\n\nimport _ \"gonum.org/v1/plot\"\n")
	write("tui/tui.go", "package tui\n")
	vs, _ := check(listPackages(t, root))
	var got []string
	for _, v := range vs {
		got = append(got, v.msg)
	}
	for _, want := range []string{
		"runtime/sim (source) imports canary (analyzer)",   // the !linux file
		"runtime/sim (source) imports checksum (analyzer)", // the linux file
		"repro (source) imports checksum (analyzer)",       // a package go list skips
		"tui imports gonum.org/v1/plot in a test",
	} {
		if !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, want) }) {
			t.Errorf("no violation %q among %q", want, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("%d violations, want 4: %q", len(got), got)
	}
}
