//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
)

// The process-group side of `kvcanary wrap` (wrap.go).

// wrapSignals are the signals wrap forwards to the command. A hangup (the
// terminal closed) or SIGQUIT would otherwise end wrap alone and leave the
// engine, in its own process group, holding the GPUs: they are forwarded as
// SIGTERM.
var wrapSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func wrapSupported() error { return nil }

// ownProcessGroup makes cmd the leader of a new process group: a terminal's
// Ctrl-C reaches wrap alone, which forwards it to the whole group (the
// engine and every scheduler process it spawned).
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithWrap(cmd.SysProcAttr)
}

// wrapDirOwner is the file in a wrap's socket directory that names the wrap
// process owning it, so a later wrap can tell a directory left by a
// SIGKILLed one (no deferred cleanup ran) from one in use.
const wrapDirOwner = "owner.pid"

// markWrapDir writes this process's pid into dir.
func markWrapDir(dir string) {
	_ = os.WriteFile(dir+"/"+wrapDirOwner, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
}

// cleanStaleWrapDirs removes the kvcanary-wrap-* directories in parent
// whose owner process no longer exists (issue 27 D11) and returns how many.
// A directory without an owner file (an older wrap's, or one being made) is
// left alone: nothing says it is stale. Only directories of this user are
// looked at (the temp dir is shared; another user's are not ours to judge).
func cleanStaleWrapDirs(parent string) int {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "kvcanary-wrap-") {
			continue
		}
		dir := parent + "/" + e.Name()
		var st syscall.Stat_t
		if syscall.Stat(dir, &st) != nil || int(st.Uid) != os.Getuid() {
			continue
		}
		b, err := os.ReadFile(dir + "/" + wrapDirOwner)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // alive (or not ours to signal: EPERM), or unreadable
		}
		if os.RemoveAll(dir) == nil {
			n++
		}
	}
	return n
}

// signalGroup sends s to the process group pgid — SIGKILL instead when
// kill — and returns the name of what it sent.
func signalGroup(pgid int, s os.Signal, kill bool) string {
	sig, _ := s.(syscall.Signal)
	if sig == 0 || sig == syscall.SIGHUP || sig == syscall.SIGQUIT {
		sig = syscall.SIGTERM
	}
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pgid, sig) // ESRCH: the group is already gone
	return signalName(sig)
}

// groupAlive reports whether any process of group pgid still runs. A zombie
// does not: it has exited and waits for its parent (init, once the command
// is gone) to reap it, yet kill(-pgid, 0) still finds it. Where /proc lists
// processes (Linux) the zombies are told apart; elsewhere kill's answer
// stands.
func groupAlive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false // ESRCH: nothing left, not even a zombie
	}
	live, known := liveInGroup(pgid)
	return live || !known
}

// liveInGroup scans /proc for a process of group pgid that is not a zombie
// (state Z) or dead (X); known is false without a readable /proc.
func liveInGroup(pgid int) (live, known bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	want := strconv.Itoa(pgid)
	for _, e := range ents {
		name := e.Name()
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		// "pid (comm) state ppid pgrp …": comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[2] != want {
			continue
		}
		if f[0] != "Z" && f[0] != "X" {
			return true, true
		}
	}
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return false, false // a /proc that does not list processes
	}
	return false, true
}

// exitStatus turns a finished command into wrap's exit code: its own code,
// or 128+N when signal N ended it (the shells' convention).
func exitStatus(ps *os.ProcessState) (code int, sig string) {
	if ps == nil {
		return cmdutil.ExitInput, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(ws.Signal())
	}
	if c := ps.ExitCode(); c >= 0 {
		return c, ""
	}
	return cmdutil.ExitInput, ""
}

// signalNames spell the signals people send and engines die of.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}
