package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/pki"
)

// CertsInitOptions are the inputs of `kvcanary certs init`.
type CertsInitOptions struct {
	IO       *cmdutil.IOStreams
	Dir      string
	Clients  int
	Names    []string
	Hosts    []string
	Validity time.Duration
}

// NewCmdCerts builds `kvcanary certs` and its subcommand init.
func NewCmdCerts(f *cmdutil.Factory, runF func(*CertsInitOptions) error) *cobra.Command {
	return newGroupCmd(groupHelp{
		Use:     "certs",
		Short:   "Make certificates for authenticated (mTLS) remote collection",
		Example: "  kvcanary certs init ./pki --client-names prefill-0,decode-0",
	}, newCmdCertsInit(f, runF))
}

// newCmdCertsInit builds `kvcanary certs init`.
func newCmdCertsInit(f *cmdutil.Factory, runF func(*CertsInitOptions) error) *cobra.Command {
	opts := &CertsInitOptions{IO: f.IO}
	cmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Make a small CA, a collector certificate and client certificates in DIR",
		Long: `Make what a first mTLS setup needs, with no openssl: an ECDSA P-256 CA
(ca.pem, ca-key.pem), a collector certificate (server.pem, server-key.pem) for
localhost, 127.0.0.1, ::1 and every --hosts entry, and one client certificate
per producer host (NAME.pem, NAME-key.pem). A client certificate's subject CN is
the host name the collector gives that producer's events (src.node), whatever
the producer claims. DIR is created mode 0700, every file 0600; existing files
are never overwritten.

Keep ca-key.pem off the producer hosts: it signs new producers. Copy ca.pem
and one NAME.pem/NAME-key.pem pair to each producer host.`,
		Example: `  kvcanary certs init ./pki --hosts collector.internal,10.0.0.5 --client-names prefill-0,decode-0
  kvcanary collect --listen tcp://0.0.0.0:7070 --tls-cert pki/server.pem --tls-key pki/server-key.pem --client-ca pki/ca.pem
  # on the producer host, without wrap (wrap collects locally and refuses KVCANARY_ADDR):
  export PYTHONPATH="$(kvcanary pyhook path)${PYTHONPATH:+:$PYTHONPATH}"
  KVCANARY_ADDR=tcp://collector.internal:7070 KVCANARY_TLS_CERT=pki/prefill-0.pem \
    KVCANARY_TLS_KEY=pki/prefill-0-key.pem KVCANARY_TLS_CA=pki/ca.pem python -m sglang.launch_server …`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Dir = args[0]
			if opts.Clients < 0 || opts.Clients > 10000 {
				return cmdutil.UsageError("certs init: --clients %d: want 0..10000", opts.Clients)
			}
			if len(opts.Names) > 0 && cmd.Flags().Changed("clients") && opts.Clients != len(opts.Names) {
				return cmdutil.UsageError("certs init: --clients %d and %d --client-names disagree; give one of them", opts.Clients, len(opts.Names))
			}
			if opts.Validity <= 0 {
				return cmdutil.UsageError("certs init: --validity %v: want a positive duration", opts.Validity)
			}
			return runOr(opts, runF, certsInitRun)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&opts.Clients, "clients", 1, "client certificates to make, named client-1 … client-N")
	fl.StringSliceVar(&opts.Names, "client-names", nil, "client certificate names (producer host names), instead of client-1 … client-N")
	fl.StringSliceVar(&opts.Hosts, "hosts", nil, "names and IP addresses producers dial the collector at (besides localhost, 127.0.0.1, ::1)")
	fl.DurationVar(&opts.Validity, "validity", 365*24*time.Hour, "how long every certificate is valid")
	return cmd
}

func certsInitRun(opts *CertsInitOptions) error {
	names := opts.Names
	if len(names) == 0 {
		for i := 1; i <= opts.Clients; i++ {
			names = append(names, fmt.Sprintf("client-%d", i))
		}
	}
	for _, h := range opts.Hosts {
		if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /") {
			return cmdutil.UsageError("certs init: --hosts entry %q is not a host name or IP address", h)
		}
	}
	files, err := pki.Init(opts.Dir, pki.Options{Clients: names, Hosts: opts.Hosts, Validity: opts.Validity})
	if err != nil {
		if len(files) == 0 {
			return cmdutil.UsageError("certs init: %w", err)
		}
		return cmdutil.InputError(fmt.Errorf("certs init: %w (written before the failure: %s)", err, strings.Join(files, ", ")))
	}
	out := opts.IO.Out
	fmt.Fprintf(out, "wrote %d files to %s (mode 0600):\n", len(files), opts.Dir)
	for _, f := range files {
		fmt.Fprintf(out, "  %s\n", filepath.Base(f))
	}
	fmt.Fprintf(out, "collector: --tls-cert %s --tls-key %s --client-ca %s\n",
		filepath.Join(opts.Dir, pki.ServerFile), filepath.Join(opts.Dir, pki.ServerKeyFile), filepath.Join(opts.Dir, pki.CAFile))
	// One line per producer host: each needs its own pair (its CN is the
	// host name its events get), so a line for the first alone left the
	// others to guess.
	for _, name := range names {
		c, k := pki.ClientFiles(name)
		fmt.Fprintf(out, "producer %s: KVCANARY_TLS_CERT=%s KVCANARY_TLS_KEY=%s KVCANARY_TLS_CA=%s\n", name,
			filepath.Join(opts.Dir, c), filepath.Join(opts.Dir, k), filepath.Join(opts.Dir, pki.CAFile))
	}
	fmt.Fprintf(out, "keep %s off producer hosts: it signs new producers\n", pki.CAKeyFile)
	return nil
}
