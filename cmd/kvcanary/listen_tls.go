package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/runtime/hook"
)

// listenTLS are the authentication flags of `collect` and `watch --listen`:
// mTLS for a collector other hosts reach (runtime/hook/WIRE.md "TLS").
type listenTLS struct {
	Cert, Key, ClientCA string
}

// addListenSecurityFlags adds --tls-cert, --tls-key, --client-ca and
// --insecure-remote (bound to insecure), with --allow-remote kept as a
// deprecated alias of --insecure-remote.
func addListenSecurityFlags(cmd *cobra.Command, l *listenTLS, insecure *bool, with string) {
	fl := cmd.Flags()
	fl.StringVar(&l.Cert, "tls-cert", "", with+"serve TLS 1.3 with this PEM certificate `FILE` (with --tls-key and --client-ca; kvcanary certs init makes the three)")
	fl.StringVar(&l.Key, "tls-key", "", with+"PEM key `FILE` of --tls-cert")
	fl.StringVar(&l.ClientCA, "client-ca", "", with+"PEM CA `FILE` producers' client certificates must chain to; a certificate's subject CN becomes its events' src.node")
	fl.BoolVar(insecure, "insecure-remote", false, with+"allow a TCP address other hosts reach WITHOUT TLS: anyone who can reach the port can inject events (warns on every start)")
	fl.BoolVar(insecure, "allow-remote", false, "deprecated alias of --insecure-remote")
	_ = fl.MarkDeprecated("allow-remote", "use --tls-cert/--tls-key/--client-ca, or --insecure-remote to keep accepting unauthenticated remote producers")
}

// apply loads the TLS configuration into o (all three files or none) and
// sets o.AllowRemote from insecure, warning on errOut (every start) when a
// TCP listener is to accept remote producers without TLS.
func (l listenTLS) apply(o *hook.ListenOptions, listen string, insecure bool, errOut io.Writer, cmd string) error {
	set := 0
	for _, v := range []string{l.Cert, l.Key, l.ClientCA} {
		if v != "" {
			set++
		}
	}
	tcp := strings.HasPrefix(listen, "tcp://")
	switch {
	case set == 0:
	case set < 3:
		return cmdutil.UsageError("%s: --tls-cert, --tls-key and --client-ca go together (mutual TLS needs all three)", cmd)
	case !tcp:
		return cmdutil.UsageError("%s: --tls-cert needs a tcp:// --listen address (a Unix socket is authenticated by its file mode)", cmd)
	default:
		cfg, err := hook.ServerTLSConfig(l.Cert, l.Key, l.ClientCA)
		if err != nil {
			return cmdutil.InputError(err)
		}
		o.TLS = cfg
	}
	o.AllowRemote = insecure
	if insecure && o.TLS == nil && tcp {
		fmt.Fprintf(errOut, "%s: WARNING: --insecure-remote: %s accepts events from anyone who can reach it, unauthenticated and unencrypted; forged events cannot be told from real ones. Use --tls-cert, --tls-key and --client-ca (kvcanary certs init).\n", cmd, listen)
	}
	return nil
}
