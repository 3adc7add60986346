package hook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Authenticated collection (WIRE.md "Transport: TLS").
//
// A collector with ListenOptions.TLS set speaks TLS 1.3 on its TCP socket and
// requires a client certificate signed by one of the configured client CAs.
// The certificate's subject CN names the producer's host: it overwrites
// src.node of every event on that connection, whatever the producer claims,
// so a verdict's "which host" is authenticated, not asserted. Handshakes run
// on the connection's own goroutine (never on the accept loop), bounded by
// HandshakeTimeout, and count toward MaxConns while they run.

// Environment variables the Go and Python emitters read for a TLS collector.
const (
	EnvTLSCert = "KVCANARY_TLS_CERT" // PEM client certificate
	EnvTLSKey  = "KVCANARY_TLS_KEY"  // PEM key of the client certificate
	EnvTLSCA   = "KVCANARY_TLS_CA"   // PEM CA that signed the collector's certificate
)

// DefaultHandshakeTimeout bounds a TLS handshake at the collector.
const DefaultHandshakeTimeout = 3 * time.Second

// ServerTLSConfig loads a collector's certificate and key and the CA bundle
// client certificates must chain to. The config requires TLS 1.3 and checks
// a client certificate when one is sent; the collector refuses connections
// without one after the handshake (so the refusal is counted by reason).
func ServerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, pool, err := loadTLSFiles("server", certFile, keyFile, clientCAFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		// Producers never resume; a session ticket would also be the only
		// thing a collector ever sends, and emitters read to detect a
		// closed connection.
		SessionTicketsDisabled: true,
	}, nil
}

// ClientTLSConfig loads a producer's certificate and key and the CA that
// signed the collector's certificate (TLS 1.3; the server name is checked
// against the dialled host).
func ClientTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, pool, err := loadTLSFiles("client", certFile, keyFile, caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool}, nil
}

// ClientTLSFromEnv builds ClientTLSConfig from KVCANARY_TLS_CERT, _KEY and
// _CA. It returns nil, nil when none is set, and an error naming the missing
// ones when only some are.
func ClientTLSFromEnv() (*tls.Config, error) {
	cert, key, ca := os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey), os.Getenv(EnvTLSCA)
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	var missing []string
	for _, v := range [][2]string{{EnvTLSCert, cert}, {EnvTLSKey, key}, {EnvTLSCA, ca}} {
		if v[1] == "" {
			missing = append(missing, v[0])
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("TLS settings: %v unset (set all three of %s, %s, %s, or none)", missing, EnvTLSCert, EnvTLSKey, EnvTLSCA)
	}
	return ClientTLSConfig(cert, key, ca)
}

// loadTLSFiles loads the certificate and key of a side (server or client)
// and the CA bundle its peer's certificate must chain to.
func loadTLSFiles(side, certFile, keyFile, caFile string) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("load %s certificate %s / key %s: %w", side, certFile, keyFile, err)
	}
	pool, err := loadCAPool(caFile)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return cert, pool, nil
}

func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// handshake runs the server side of a TLS handshake on nc and returns the
// TLS connection and the authenticated host name (the client certificate's
// subject CN), or a refusal reason (>= 0) and the error.
func (c *Collector) handshake(nc net.Conn) (*tls.Conn, string, int, error) {
	timeout := c.opts.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	tc := tls.Server(nc, c.opts.TLS)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, "", classifyTLSError(err), err
	}
	st := tc.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return nil, "", refuseTLSNoCert, errors.New("the client sent no certificate")
	}
	leaf := st.PeerCertificates[0]
	if leaf.Subject.CommonName == "" {
		return nil, "", refuseTLSBadCert, errors.New("the client certificate has no subject CN to name its host")
	}
	return tc, leaf.Subject.CommonName, -1, nil
}

func classifyTLSError(err error) int {
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return refuseTLSUnknownCA
	}
	var ci x509.CertificateInvalidError
	if errors.As(err, &ci) {
		if ci.Reason == x509.Expired {
			return refuseTLSExpired
		}
		return refuseTLSBadCert
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return refuseTLSBadCert
	}
	return refuseTLSHandshake
}
