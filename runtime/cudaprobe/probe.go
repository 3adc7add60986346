package cudaprobe

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Config says what to attach to.
type Config struct {
	// Lib is the libcuda.so to probe. Empty: found in the first of PIDs'
	// memory maps (through /proc/PID/root, so containers work).
	Lib string
	// PIDs are the processes to trace; the kernel drops every other process's
	// calls. Empty: every process that calls into Lib.
	PIDs []int
	// TrapOnlyPIDs installs the breakpoints only in the one process of PIDs
	// (a perf-event pid filter), so other processes using the library pay
	// nothing. Needs exactly one PID; AddPID cannot widen such a probe.
	TrapOnlyPIDs bool
	// RingBytes is the ring-buffer size: a power of two, at least one page.
	// Default 4 MiB (about 35k records).
	RingBytes int
	// ProcRoot is the proc file system (default /proc); tests point it at a fake.
	ProcRoot string
}

// Lost counts calls the probe could not deliver, reported at exit.
type Lost struct {
	RingFull     uint64 `json:"ring_full"`     // ring buffer full: the call's record was dropped
	InflightFull uint64 `json:"inflight_full"` // entry table full: the call's entry was not kept
	NoEntry      uint64 `json:"no_entry"`      // a return without its entry (attached mid-call)
	Malformed    uint64 `json:"malformed"`     // records that failed Decode
}

// Total is the number of calls lost for any reason.
func (l Lost) Total() uint64 { return l.RingFull + l.InflightFull + l.NoEntry + l.Malformed }

func (c Config) procRoot() string {
	if c.ProcRoot == "" {
		return "/proc"
	}
	return c.ProcRoot
}

// FindLibcuda returns the path, through procRoot/PID/root, of the libcuda.so
// mapped by process pid. An error matching ErrNoLibcuda says the process maps
// none (not a CUDA process, or it has not initialised CUDA yet).
func FindLibcuda(procRoot string, pid int) (string, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	mapsPath := filepath.Join(procRoot, strconv.Itoa(pid), "maps")
	f, err := os.Open(mapsPath)
	if err != nil {
		return "", fmt.Errorf("read memory map of process %d: %w", pid, err)
	}
	defer f.Close()
	lib, err := libcudaInMaps(f)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", mapsPath, err)
	}
	if lib == "" {
		return "", fmt.Errorf("process %d maps no libcuda.so (not a CUDA process, or CUDA not initialised yet; pass --lib to probe a library directly): %w", pid, ErrNoLibcuda)
	}
	return filepath.Join(procRoot, strconv.Itoa(pid), "root", lib), nil
}

// libcudaInMaps returns the first mapped file named libcuda.so* in a
// /proc/PID/maps listing.
func libcudaInMaps(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		// address perms offset dev inode pathname
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if strings.HasPrefix(filepath.Base(path), "libcuda.so") && strings.HasPrefix(path, "/") {
			return path, nil
		}
	}
	return "", sc.Err()
}

// CommonLibcudaPaths are where distributions and the NVIDIA installer put
// libcuda.so.1, searched by SearchLibcuda after the linker cache.
var CommonLibcudaPaths = []string{
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1",
	"/usr/lib64/libcuda.so.1",
	"/usr/lib/libcuda.so.1",
	"/usr/local/cuda/lib64/stubs/libcuda.so",
	"/usr/local/nvidia/lib64/libcuda.so.1",
	"/usr/lib/wsl/lib/libcuda.so.1",
}

// SearchLibcuda looks for libcuda.so.1 in an `ldconfig -p` listing (may be
// empty) and then in paths; exists reports whether a path is a file. It
// returns "" when nothing is found.
func SearchLibcuda(ldconfig string, paths []string, exists func(string) bool) string {
	for _, line := range strings.Split(ldconfig, "\n") {
		// "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.HasPrefix(name, "libcuda.so") {
			continue
		}
		if _, p, ok := strings.Cut(rest, "=> "); ok && exists(strings.TrimSpace(p)) {
			return strings.TrimSpace(p)
		}
	}
	for _, p := range paths {
		if exists(p) {
			return p
		}
	}
	return ""
}
