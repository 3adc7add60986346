//go:build !linux

package hook

import "net"

// peerProcess is not supported on this platform: producers' pids stay as
// they sent them.
func peerProcess(net.Conn) (int32, string) { return 0, "" }
