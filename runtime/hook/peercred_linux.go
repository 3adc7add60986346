//go:build linux

package hook

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// peer is the kernel's account of the process at the other end of a
// connection: what the producer claims (src.pid, src.node) is checked
// against it, never trusted in its place.
type peer struct {
	PID  int32
	UID  int64 // -1: unknown
	Proc string
}

// peerProcess returns the kernel's peer of c: SO_PEERCRED on a Unix socket;
// on loopback TCP the socket's owner in /proc/net/tcp{,6} and the process
// holding it. Zero PID and UID -1 when unknown.
func peerProcess(c net.Conn) peer {
	p := peer{UID: -1}
	switch c := c.(type) {
	case *net.UnixConn:
		raw, err := c.SyscallConn()
		if err != nil {
			return p
		}
		var cred *syscall.Ucred
		var cerr error
		if err := raw.Control(func(fd uintptr) {
			cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		}); err != nil || cerr != nil || cred == nil {
			return p
		}
		p.PID, p.UID = cred.Pid, int64(cred.Uid)
	case *net.TCPConn:
		la, _ := c.LocalAddr().(*net.TCPAddr)
		ra, _ := c.RemoteAddr().(*net.TCPAddr)
		if la == nil || ra == nil || !ra.IP.IsLoopback() {
			return p // another host: the kernel here knows nothing of its processes
		}
		inode, uid, ok := tcpSocketOwner(ra, la)
		if !ok {
			return p
		}
		p.UID = uid
		p.PID = socketPID(inode)
	}
	if p.PID != 0 {
		if comm, err := os.ReadFile("/proc/" + strconv.Itoa(int(p.PID)) + "/comm"); err == nil {
			p.Proc = strings.TrimSpace(string(comm))
		}
	}
	return p
}

// tcpSocketOwner finds the socket whose local end is local and remote end
// remote (the producer's side of a loopback connection) in /proc/net/tcp or
// tcp6: its inode and owner uid.
func tcpSocketOwner(local, remote *net.TCPAddr) (inode uint64, uid int64, ok bool) {
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[0] == "sl" {
				continue
			}
			if !procAddrIs(fs[1], local) || !procAddrIs(fs[2], remote) {
				continue
			}
			u, err1 := strconv.ParseInt(fs[7], 10, 64)
			in, err2 := strconv.ParseUint(fs[9], 10, 64)
			if err1 == nil && err2 == nil && in != 0 {
				f.Close()
				return in, u, true
			}
		}
		f.Close()
	}
	return 0, -1, false
}

// procAddrIs reports whether s, an address of /proc/net/tcp (hex IP in
// host order per 32-bit word, ":", hex port), is a.
func procAddrIs(s string, a *net.TCPAddr) bool {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	if p, err := strconv.ParseUint(port, 16, 16); err != nil || int(p) != a.Port {
		return false
	}
	raw, err := hex.DecodeString(host)
	if err != nil || len(raw)%4 != 0 {
		return false
	}
	for i := 0; i < len(raw); i += 4 { // each 32-bit word is little-endian
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return net.IP(raw).Equal(a.IP)
}

// maxPIDScan bounds the processes looked at for a socket's owner.
const maxPIDScan = 4096

// socketPID is the process holding the socket with inode, found in
// /proc/*/fd (0 when none is found among the first maxPIDScan processes, or
// they are not readable).
func socketPID(inode uint64) int32 {
	want := fmt.Sprintf("socket:[%d]", inode)
	dirs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for i, d := range dirs {
		if i >= maxPIDScan {
			break
		}
		fds, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(d, fd.Name())); err == nil && l == want {
				pid, _ := strconv.ParseInt(filepath.Base(filepath.Dir(d)), 10, 32)
				return int32(pid)
			}
		}
	}
	return 0
}
