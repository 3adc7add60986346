package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/traces"
)

// mergeTo runs trace merge of a and b into out.
func mergeTo(t *testing.T, out string, paths ...string) error {
	t.Helper()
	ios, _, _, _ := cmdutil.Test()
	return traceMergeRun(&TraceMergeOptions{IO: ios, Ctx: context.Background(), JSON: &cmdutil.JSONFlags{}, Paths: paths, Out: out, Window: 16})
}

// Issue 27 D3: -o naming a device node, a FIFO or a symbolic link is
// written through, never replaced by a regular file renamed over it.
func TestTraceMergeOutputNotReplaced(t *testing.T) {
	dir := t.TempDir()
	a := mergeInput(t, filepath.Join(dir, "a.kvtrace"), traces.Manifest{Run: "a", Created: time.Now()})
	b := mergeInput(t, filepath.Join(dir, "b.kvtrace"), traces.Manifest{Run: "b", Created: time.Now().Add(time.Second)})

	t.Run("device", func(t *testing.T) {
		null := filepath.Join(t.TempDir(), "null")
		if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Skipf("cannot make a device node (%v): needs CAP_MKNOD", err)
		}
		if err := mergeTo(t, null, a, b); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("-o device node after the merge: %v %v, want the character device", fi.Mode(), err)
		}
		if _, _, err := runCmd(NewCmdReport, a, "-o", null); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(null); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("report -o device node: %v %v, want the character device", fi.Mode(), err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "pipe")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		got := make(chan []byte, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				got <- nil
				return
			}
			bs, _ := io.ReadAll(f)
			f.Close()
			got <- bs
		}()
		if err := mergeTo(t, fifo, a, b); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("-o FIFO after the merge: %v %v, want the FIFO", fi.Mode(), err)
		}
		bs := <-got
		copyPath := filepath.Join(t.TempDir(), "from-fifo.kvtrace")
		os.WriteFile(copyPath, bs, 0o600)
		if c := readBundle(t, copyPath); len(c.Events) != 2 || c.Footer == nil {
			t.Fatalf("bundle read from the FIFO: %d events, footer %v; want 2 and a footer", len(c.Events), c.Footer != nil)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		d := t.TempDir()
		link := filepath.Join(d, "latest.kvtrace")
		if err := os.Symlink("runs-1.kvtrace", link); err != nil {
			t.Fatal(err)
		}
		if err := mergeTo(t, link, a, b); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("-o symlink after the merge: %v %v, want the link kept", fi.Mode(), err)
		}
		if c := readBundle(t, filepath.Join(d, "runs-1.kvtrace")); len(c.Events) != 2 {
			t.Fatalf("link target holds %d events, want 2", len(c.Events))
		}
		html := filepath.Join(d, "report.html")
		os.Symlink("real.html", html)
		if _, _, err := runCmd(NewCmdReport, a, "-o", html); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(html); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("report -o symlink: %v %v, want the link kept", fi.Mode(), err)
		}
		if bs, _ := os.ReadFile(filepath.Join(d, "real.html")); !strings.Contains(string(bs), "<html") {
			t.Fatal("report -o symlink: the target holds no report")
		}
	})
}

// Issue 27 D8: a bundle given twice (the same path, a link to it, or a copy
// with the same manifest) is refused: merged, it doubles every event.
func TestTraceMergeRefusesDuplicates(t *testing.T) {
	dir := t.TempDir()
	a := mergeInput(t, filepath.Join(dir, "a.kvtrace"), traces.Manifest{Run: "a", Created: time.Now()})
	b := mergeInput(t, filepath.Join(dir, "b.kvtrace"), traces.Manifest{Run: "a", Created: time.Now().Add(time.Second)})
	link := filepath.Join(dir, "link.kvtrace")
	os.Symlink(a, link)
	// A re-compressed copy: the same recording, other bytes.
	rc := filepath.Join(dir, "recompressed.kvtrace")
	src := readBundle(t, a)
	w, err := traces.Create(rc, src.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range src.Events {
		w.Write(ev)
	}
	w.Write(src.Events[0]) // and one more: not byte-identical
	w.Close()
	out := filepath.Join(dir, "all.kvtrace")
	for _, pair := range [][2]string{{a, a}, {a, link}, {a, rc}} {
		err := mergeTo(t, out, pair[0], pair[1])
		if cmdutil.ExitCode(err) != cmdutil.ExitInput || err == nil || !strings.Contains(err.Error(), "twice") && !strings.Contains(err.Error(), "same") {
			t.Errorf("merge %s %s: %v (exit %d), want it refused (exit 3)", filepath.Base(pair[0]), filepath.Base(pair[1]), err, cmdutil.ExitCode(err))
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("merge %s %s left %s", filepath.Base(pair[0]), filepath.Base(pair[1]), out)
		}
	}
	// Two recordings of one run (two hosts) are not duplicates.
	if err := mergeTo(t, out, a, b); err != nil {
		t.Fatalf("merge of two hosts' bundles of run a: %v", err)
	}
}

// Issue 27 D18: trace inspect of a bundle whose manifest is lost says so
// instead of printing the zero manifest's defaults (created 0001-01-01,
// config {}) as facts.
func TestTraceInspectLostManifest(t *testing.T) {
	path := writeTraceBundle(t, 40)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0xff // inside the manifest frame
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(NewCmdTraceInspect, path)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if !strings.Contains(out, "lost (frame 1") || !strings.Contains(out, "format     unknown") || strings.Contains(out, "0001-01-01") || strings.Contains(out, "config     {") {
		t.Fatalf("inspect of a bundle with a lost manifest:\n%s", out)
	}
}
