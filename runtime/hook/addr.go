package hook

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ErrRemoteRefused is returned by Listen for a TCP address that is not
// loopback when neither ListenOptions.TLS nor ListenOptions.AllowRemote is set.
var ErrRemoteRefused = errors.New("non-loopback address refused")

// ErrBadAddress is returned by Listen and Dial for an address that is not
// unix:///path.sock or tcp://HOST:PORT (a usage error, not an I/O failure).
var ErrBadAddress = errors.New("bad address")

// endpoint is a parsed collector address.
type endpoint struct {
	network string // "unix" | "tcp"
	address string // socket path or host:port
}

func (e endpoint) String() string {
	if e.network == "unix" {
		return "unix://" + e.address
	}
	return "tcp://" + e.address
}

// parseAddr parses unix:///path.sock or tcp://HOST:PORT.
func parseAddr(addr string) (endpoint, error) {
	switch {
	case strings.HasPrefix(addr, "unix://"):
		p := strings.TrimPrefix(addr, "unix://")
		if p == "" {
			return endpoint{}, fmt.Errorf("address %q: empty socket path (want unix:///path.sock): %w", addr, ErrBadAddress)
		}
		if len(p) > maxUnixPath {
			// The kernel would refuse it at bind or connect (or, for some
			// callers, silently cut it): say so here, naming the path.
			return endpoint{}, fmt.Errorf("socket path %q is %d bytes, over the %d-byte limit of a Unix socket address (sun_path); use a shorter path: %w", p, len(p), maxUnixPath, ErrBadAddress)
		}
		return endpoint{"unix", p}, nil
	case strings.HasPrefix(addr, "tcp://"):
		hp := strings.TrimPrefix(addr, "tcp://")
		_, port, err := net.SplitHostPort(hp)
		if err != nil {
			return endpoint{}, fmt.Errorf("address %q: %w (want tcp://127.0.0.1:PORT): %w", addr, err, ErrBadAddress)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return endpoint{}, fmt.Errorf("address %q: port %q: want a number from 0 to 65535: %w", addr, port, ErrBadAddress)
		}
		return endpoint{"tcp", hp}, nil
	}
	return endpoint{}, fmt.Errorf("address %q: want unix:///path.sock or tcp://127.0.0.1:PORT: %w", addr, ErrBadAddress)
}

// checkLoopback refuses a TCP listen address that other hosts could reach.
func checkLoopback(ep endpoint) error {
	host, _, _ := net.SplitHostPort(ep.address)
	if host == "" {
		return fmt.Errorf("listen %s: an empty host listens on every interface: %w; serve mutual TLS (--tls-cert, --tls-key, --client-ca) to accept events from other hosts, or pass --insecure-remote (formerly --allow-remote) to accept them unauthenticated", ep, ErrRemoteRefused)
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		found, err := net.LookupIP(host)
		if err != nil {
			return fmt.Errorf("listen %s: resolve %s: %w (an IPv4 address is written in full: 127.0.0.1): %w", ep, host, err, ErrBadAddress)
		}
		ips = found
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return fmt.Errorf("listen %s: %s is not a loopback address: %w; serve mutual TLS (--tls-cert, --tls-key, --client-ca) to accept events from other hosts, or pass --insecure-remote (formerly --allow-remote) to accept them unauthenticated", ep, ip, ErrRemoteRefused)
		}
	}
	return nil
}
