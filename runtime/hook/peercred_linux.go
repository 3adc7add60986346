//go:build linux

package hook

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// peerProcess returns the pid (SO_PEERCRED) and command name of the process
// at the other end of a Unix socket, or zero values when unknown.
func peerProcess(c net.Conn) (int32, string) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, ""
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, ""
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil || cred == nil {
		return 0, ""
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(int(cred.Pid)) + "/comm")
	if err != nil {
		return cred.Pid, ""
	}
	return cred.Pid, strings.TrimSpace(string(comm))
}
