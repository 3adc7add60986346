//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
)

// Stubs: wrap needs process groups and Unix sockets.

var wrapSignals = []os.Signal{os.Interrupt}

func wrapSupported() error {
	return errors.New("wrap: needs a Unix system (process groups, Unix sockets); run the engine with PYTHONPATH=$(kvcanary pyhook path) and kvcanary collect instead")
}

func ownProcessGroup(*exec.Cmd)                    {}
func markWrapDir(string)                           {}
func cleanStaleWrapDirs(string) int                { return 0 }
func signalGroup(int, os.Signal, bool) string      { return "" }
func groupAlive(int) bool                          { return false }
func exitStatus(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }
