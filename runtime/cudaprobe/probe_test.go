package cudaprobe

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindLibcuda(t *testing.T) {
	root := t.TempDir()
	write := func(pid, maps string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "maps"), []byte(maps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("42", `55d4c000-55d4d000 r--p 00000000 08:01 123 /usr/bin/python3.11
7f00a000-7f00b000 r-xp 00000000 00:00 0 [vdso]
7f01a000-7f02b000 r-xp 00010000 08:01 456 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f03a000-7f03b000 r-xp 00000000 08:01 789 /usr/lib/x86_64-linux-gnu/libcudart.so.12
`)
	write("43", "7f00a000-7f00b000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n")
	got, err := FindLibcuda(root, 42)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "42", "root", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"); got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	_, err = FindLibcuda(root, 43)
	if !errors.Is(err, ErrNoLibcuda) || !strings.Contains(err.Error(), "process 43 maps no libcuda.so") || !strings.Contains(err.Error(), "--lib") {
		t.Fatalf("FindLibcuda(43) = %v", err)
	}
	if _, err := FindLibcuda(root, 44); err == nil || !strings.Contains(err.Error(), "process 44") {
		t.Fatalf("FindLibcuda(44) = %v", err)
	}
}

func TestSearchLibcuda(t *testing.T) {
	ld := "1234 libs found in cache `/etc/ld.so.cache'\n" +
		"\tlibcudart.so.12 (libc6,x86-64) => /usr/lib/libcudart.so.12\n" +
		"\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
	have := map[string]bool{"/usr/lib/x86_64-linux-gnu/libcuda.so.1": true, "/usr/lib64/libcuda.so.1": true}
	exists := func(p string) bool { return have[p] }
	if got := SearchLibcuda(ld, CommonLibcudaPaths, exists); got != "/usr/lib/x86_64-linux-gnu/libcuda.so.1" {
		t.Fatalf("from ldconfig: %q", got)
	}
	if got := SearchLibcuda("", CommonLibcudaPaths, exists); got != "/usr/lib/x86_64-linux-gnu/libcuda.so.1" {
		t.Fatalf("from paths: %q", got)
	}
	delete(have, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
	if got := SearchLibcuda(ld, CommonLibcudaPaths, exists); got != "/usr/lib64/libcuda.so.1" {
		t.Fatalf("stale cache entry: %q", got)
	}
	if got := SearchLibcuda(ld, nil, func(string) bool { return false }); got != "" {
		t.Fatalf("nothing: %q", got)
	}
}

func TestLostTotal(t *testing.T) {
	if (Lost{RingFull: 1, InflightFull: 2, NoEntry: 3, Malformed: 4}).Total() != 10 {
		t.Fatal("Total")
	}
}
