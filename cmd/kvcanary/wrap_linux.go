//go:build linux

package main

import "syscall"

// dieWithWrap asks the kernel to send the command SIGTERM when wrap dies
// (PR_SET_PDEATHSIG): a SIGKILLed wrap, which cannot forward anything, no
// longer leaves the engine running under init holding the GPUs (issue 27
// D11). The engine's launcher then ends its own scheduler processes, as it
// does on any SIGTERM. The signal follows the OS thread that started the
// command; Go keeps its threads for the process's life unless a goroutine
// exits while locked to one, which wrap's never do.
func dieWithWrap(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGTERM }
