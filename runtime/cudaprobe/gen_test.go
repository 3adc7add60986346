package cudaprobe

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bpf2goArgs reads the bpf2go arguments from gen.go's go:generate line, so the
// check always runs what `go generate` runs.
func bpf2goArgs(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "//go:generate go run github.com/cilium/ebpf/cmd/bpf2go "
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return splitQuoted(rest)
		}
	}
	t.Fatal("gen.go has no bpf2go go:generate line")
	return nil
}

// splitQuoted splits on spaces, keeping double-quoted runs together.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, have = !quoted, true
		case r == ' ' && !quoted:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

func TestSplitQuoted(t *testing.T) {
	got := splitQuoted(`-tags linux -cflags "-O2 -g  -Wall" x  bpf/x.c`)
	want := []string{"-tags", "linux", "-cflags", "-O2 -g  -Wall", "x", "bpf/x.c"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("%q", got)
	}
}

// TestGeneratedObjectsUpToDate regenerates the BPF object into a temporary
// directory and compares it byte for byte with the committed files. It needs
// clang (of the major version the committed object was built with), llvm-strip
// and the libbpf headers; without them it skips.
func TestGeneratedObjectsUpToDate(t *testing.T) {
	clang, err := exec.LookPath("clang")
	if err != nil {
		t.Skip("clang not installed: cannot regenerate the BPF object")
	}
	if _, err := exec.LookPath("llvm-strip"); err != nil {
		t.Skip("llvm-strip not installed: cannot regenerate the BPF object")
	}
	if _, err := os.Stat("/usr/include/bpf/bpf_helpers.h"); err != nil {
		t.Skip("libbpf headers (libbpf-dev) not installed: cannot regenerate the BPF object")
	}
	want, err := os.ReadFile("bpf/clang-major")
	if err != nil {
		t.Fatal(err)
	}
	ver, err := exec.Command(clang, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`version (\d+)\.`).FindSubmatch(ver)
	if m == nil {
		t.Fatalf("cannot read clang version from %q", ver)
	}
	if string(m[1]) != strings.TrimSpace(string(want)) {
		t.Skipf("clang %s installed, committed object built with clang %s: bytes would differ", m[1], bytes.TrimSpace(want))
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bpf2go")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/cilium/ebpf/cmd/bpf2go").CombinedOutput(); err != nil {
		t.Fatalf("build bpf2go: %v\n%s", err, out)
	}
	pkg := filepath.Join(dir, "pkg")
	if err := os.MkdirAll(filepath.Join(pkg, "bpf"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("bpf/cudaprobe.c")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "bpf", "cudaprobe.c"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, bpf2goArgs(t)...)
	cmd.Dir = pkg
	cmd.Env = append(os.Environ(), "GOPACKAGE=cudaprobe")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go: %v\n%s", err, out)
	}
	for _, f := range []string{"cudaprobe_x86_bpfel.o", "cudaprobe_x86_bpfel.go"} {
		fresh, err := os.ReadFile(filepath.Join(pkg, f))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s is stale: run `go generate ./runtime/cudaprobe` and commit the result", f)
		}
	}
}
