package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCertInitWritesAChainingSetOf0600Files(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	files, err := Init(dir, Options{Clients: []string{"prefill-a", "decode-b"}, Hosts: []string{"10.0.0.7", "collector.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 8 {
		t.Fatalf("wrote %d files: %v", len(files), files)
	}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	caPEM, _ := os.ReadFile(filepath.Join(dir, CAFile))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem has no certificate")
	}
	load := func(cert, key string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, cert), filepath.Join(dir, key))
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve != elliptic.P256() {
			t.Errorf("%s: key %T, want ECDSA P-256", cert, c.PublicKey)
		}
		return c
	}
	srv := load(ServerFile, ServerKeyFile)
	for _, h := range []string{"127.0.0.1", "localhost", "::1", "10.0.0.7", "collector.example"} {
		if _, err := srv.Verify(x509.VerifyOptions{Roots: pool, DNSName: h}); err != nil {
			t.Errorf("server certificate for %s: %v", h, err)
		}
	}
	for _, cn := range []string{"prefill-a", "decode-b"} {
		c, k := ClientFiles(cn)
		cl := load(c, k)
		if cl.Subject.CommonName != cn {
			t.Errorf("client CN %q, want %q", cl.Subject.CommonName, cn)
		}
		if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("client %s: %v", cn, err)
		}
		if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Errorf("client %s certificate also serves as a server certificate", cn)
		}
	}
	// A second init into the same directory refuses to overwrite the CA.
	if _, err := Init(dir, Options{}); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("second init: %v", err)
	}
}

func TestCertInitRefusesBadClientNames(t *testing.T) {
	for _, cn := range []string{"", "../x", "a/b", "server", "x-key", "a b", strings.Repeat("a", 65)} {
		if _, err := Init(t.TempDir(), Options{Clients: []string{cn}}); err == nil {
			t.Errorf("client name %q accepted", cn)
		}
	}
	if _, err := Init(t.TempDir(), Options{Clients: []string{"a", "a"}}); err == nil {
		t.Error("duplicate client name accepted")
	}
}
