// Package pki makes the small certificate authority `kvcanary certs init`
// writes for a first mTLS setup: an ECDSA P-256 CA, a collector (server)
// certificate and client certificates whose subject CN names the producer's
// host. It uses crypto/x509 only; no openssl is needed.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	DER  []byte
}

// Issued is a certificate and its key, DER and PEM.
type Issued struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid from notBefore to notAfter.
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"kvcanary"}},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, DER: der}, nil
}

// CertPEM is the CA certificate in PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.DER})
}

// KeyPEM is the CA key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

// Server issues a server certificate for hosts (DNS names or IP addresses).
func (ca *CA) Server(cn string, hosts []string, notBefore, notAfter time.Time) (*Issued, error) {
	tmpl := leaf(cn, notBefore, notAfter)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(tmpl)
}

// Client issues a client certificate whose subject CN is cn (the name the
// collector gives the producer's host).
func (ca *CA) Client(cn string, notBefore, notAfter time.Time) (*Issued, error) {
	tmpl := leaf(cn, notBefore, notAfter)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

func leaf(cn string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"kvcanary"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func (ca *CA) issue(tmpl *x509.Certificate) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, Key: key, KeyPEM: kp,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// Options of Init.
type Options struct {
	// Clients are the subject CNs of the client certificates, one each
	// (the host names producers will carry).
	Clients []string
	// Hosts are the DNS names and IP addresses the collector is reached
	// at, besides localhost, 127.0.0.1 and ::1 (always included).
	Hosts []string
	// Validity of every certificate (default 365 days).
	Validity time.Duration
	// Now is the start of validity (default time.Now(), less 5 minutes
	// for clock skew).
	Now time.Time
}

// File names Init writes in its directory.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// ClientFiles names the certificate and key files of client cn.
func ClientFiles(cn string) (cert, key string) { return cn + ".pem", cn + "-key.pem" }

// Init writes a CA, a server certificate and one client certificate per
// Options.Clients into dir (created 0700 if absent); every file is 0600. It
// refuses to overwrite existing files, and returns the paths written.
func Init(dir string, o Options) ([]string, error) {
	if o.Validity <= 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Now.IsZero() {
		o.Now = time.Now().Add(-5 * time.Minute)
	}
	seen := map[string]bool{}
	for _, cn := range o.Clients {
		if err := checkName(cn); err != nil {
			return nil, err
		}
		if seen[cn] {
			return nil, fmt.Errorf("client name %q given twice", cn)
		}
		seen[cn] = true
	}
	files := []string{CAFile, CAKeyFile, ServerFile, ServerKeyFile}
	for _, cn := range o.Clients {
		c, k := ClientFiles(cn)
		files = append(files, c, k)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs dir %s: %w", dir, err)
	}
	for _, f := range files {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return nil, fmt.Errorf("%s exists; refusing to overwrite a CA or key (use an empty directory)", filepath.Join(dir, f))
		}
	}
	until := o.Now.Add(o.Validity)
	ca, err := NewCA("kvcanary CA", o.Now, until)
	if err != nil {
		return nil, err
	}
	hosts := append([]string{"localhost", "127.0.0.1", "::1"}, o.Hosts...)
	srv, err := ca.Server("kvcanary collector", hosts, o.Now, until)
	if err != nil {
		return nil, err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	contents := [][]byte{ca.CertPEM(), caKey, srv.CertPEM, srv.KeyPEM}
	for _, cn := range o.Clients {
		cl, err := ca.Client(cn, o.Now, until)
		if err != nil {
			return nil, err
		}
		contents = append(contents, cl.CertPEM, cl.KeyPEM)
	}
	var written []string
	for i, f := range files {
		p := filepath.Join(dir, f)
		if err := writeExcl(p, contents[i]); err != nil {
			return written, err
		}
		written = append(written, p)
	}
	return written, nil
}

func writeExcl(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// checkName refuses a client name that cannot be a file name or a host.
func checkName(cn string) error {
	if cn == "" {
		return errors.New("empty client name")
	}
	if len(cn) > 64 {
		return fmt.Errorf("client name %q is over 64 bytes (the X.509 CN limit)", cn)
	}
	if strings.ContainsAny(cn, "/\\\x00") || cn == "." || cn == ".." || strings.HasPrefix(cn, "-") {
		return fmt.Errorf("client name %q: want a host name (letters, digits, '.', '-', '_')", cn)
	}
	for _, r := range cn {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("client name %q: character %q is not allowed (want letters, digits, '.', '-', '_')", cn, r)
		}
	}
	if cn == "ca" || cn == "server" || strings.HasSuffix(cn, "-key") {
		return fmt.Errorf("client name %q clashes with the CA or server files", cn)
	}
	return nil
}
