//go:build linux

package hook

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvcanary/kvcanary/internal/testenv"
)

// Issue 27 D19: over the Unix socket and loopback TCP, the kernel's account
// of the producer (pid, uid) is kept beside what it claims, and a claimed
// pid that differs is shown.
func TestPeerCredentialsBesideClaims(t *testing.T) {
	for _, addr := range []string{"unix://" + filepath.Join(t.TempDir(), "c.sock"), "tcp://127.0.0.1:0"} {
		t.Run(strings.SplitN(addr, ":", 2)[0], func(t *testing.T) {
			c, rec := startCollectorAt(t, addr, ListenOptions{Run: "r"})
			ep, _ := parseAddr(c.Addr())
			nc, err := net.Dial(ep.network, ep.address)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			fmt.Fprintf(nc, `{"v":1,"kind":"replay","ts_ns":1,"src":{"node":"i-am-decode-0","pid":1},"body":{"step":1,"mode":"graph"}}`+"\n")
			testenv.WaitFor(t, "the event", func() bool { return len(rec.events()) == 1 })
			if ev := rec.events()[0]; ev.Src.PID != 1 {
				t.Errorf("the claim was not kept as claimed: src %+v", ev.Src)
			}
			st := c.Stats()
			if len(st.Conns) != 1 {
				t.Fatalf("conns %+v", st.Conns)
			}
			cs := st.Conns[0]
			want := fmt.Sprintf("claimed pid 1, the kernel says pid %d (1 events)", os.Getpid())
			if cs.PeerPID != int32(os.Getpid()) || cs.PeerUID == nil || *cs.PeerUID != int64(os.Getuid()) || cs.ClaimDiffers != want {
				uid := "nil"
				if cs.PeerUID != nil {
					uid = fmt.Sprint(*cs.PeerUID)
				}
				t.Fatalf("peer pid %d uid %s, claim %q; want pid %d uid %d and %q", cs.PeerPID, uid, cs.ClaimDiffers, os.Getpid(), os.Getuid(), want)
			}
		})
	}
}
