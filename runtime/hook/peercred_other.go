//go:build !linux

package hook

import "net"

// peer is the kernel's account of the process at the other end of a
// connection (see peercred_linux.go).
type peer struct {
	PID  int32
	UID  int64 // -1: unknown
	Proc string
}

// peerProcess is not supported on this platform: producers' pids stay as
// they sent them, and the peer is unknown.
func peerProcess(net.Conn) peer { return peer{UID: -1} }
