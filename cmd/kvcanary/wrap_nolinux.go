//go:build unix && !linux

package main

import "syscall"

// dieWithWrap: only Linux has a parent-death signal; elsewhere a SIGKILLed
// wrap leaves the command to be stopped by hand (kill -- -PGID).
func dieWithWrap(*syscall.SysProcAttr) {}
