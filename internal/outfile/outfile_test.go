package outfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func write(s string) func(*os.File) error {
	return func(f *os.File) error { _, err := io.WriteString(f, s); return err }
}

func TestRegularReplacedOnlyOnCommit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.html")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Create(context.Background(), p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "new")
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("before Commit %s holds %q, want the old content", p, b)
	}
	f.Abort()
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("after Abort %s holds %q", p, b)
	}
	if err := WriteFile(context.Background(), p, Options{}, write("new")); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if b, _ := os.ReadFile(p); string(b) != "new" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("after Commit: %q mode %v, want \"new\" and the narrower 0600 kept", b, fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
}

func TestSymlinkKept(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.md")
	link := filepath.Join(dir, "link.md")
	os.WriteFile(real, []byte("old"), 0o644)
	if err := os.Symlink("real.md", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(context.Background(), link, Options{}, write("new")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(link)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink at -o was replaced: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(real); string(b) != "new" {
		t.Fatalf("the link's target holds %q, want \"new\"", b)
	}
	// A dangling link: the file it names is created, the link stays.
	dangling := filepath.Join(dir, "dangling")
	os.Symlink("made.md", dangling)
	if err := WriteFile(context.Background(), dangling, Options{}, write("x")); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Lstat(dangling); fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("dangling symlink replaced")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "made.md")); string(b) != "x" {
		t.Fatalf("made.md holds %q", b)
	}
}

func TestDeviceNodeWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "null")
	// A test-made node (char 1,3 is null): needs CAP_MKNOD.
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Skipf("cannot make a device node here (%v): needs CAP_MKNOD", err)
	}
	if err := WriteFile(context.Background(), p, Options{}, write("x")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the device node at -o was replaced: %v %v", fi.Mode(), err)
	}
}

func TestFIFOWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(p)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := WriteFile(context.Background(), p, Options{}, write("through the pipe")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "through the pipe" {
		t.Fatalf("reader got %q", s)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO at -o was replaced: %v %v", fi.Mode(), err)
	}
	// No reader: the open waits, and returns when the context is done.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Create(ctx, p, Options{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open of a FIFO without a reader: %v, want the context's error", err)
	}
}

// /dev/stdout on a pipe is /proc/self/fd/1, a link to "pipe:[N]" that no
// path reaches: it is opened by its name and written in place.
func TestProcFDPipeWrittenInPlace(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := fmt.Sprintf("/proc/self/fd/%d", w.Fd())
	if _, err := os.Stat(p); err != nil {
		w.Close()
		t.Skipf("no /proc/self/fd: %v", err)
	}
	got := make(chan string, 1)
	go func() { b, _ := io.ReadAll(r); got <- string(b) }()
	err = WriteFile(context.Background(), p, Options{}, write("to the pipe"))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "to the pipe" {
		t.Fatalf("read %q from the pipe", s)
	}
}
