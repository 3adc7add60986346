package hook

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/internal/pki"
	"github.com/kvcanary/kvcanary/internal/testenv"
)

// tlsSetup is a CA with a collector certificate for 127.0.0.1 and helpers to
// issue client certificates, in memory and as files.
type tlsSetup struct {
	ca     *pki.CA
	server *tls.Config
	pool   *x509.CertPool
}

func newTLSSetup(t testing.TB) *tlsSetup {
	t.Helper()
	now := time.Now().Add(-time.Hour)
	ca, err := pki.NewCA("test CA", now, now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("collector", []string{"127.0.0.1", "localhost"}, now, now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := ServerTLSConfig(write("s.pem", srv.CertPEM), write("s-key.pem", srv.KeyPEM), write("ca.pem", ca.CertPEM()))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tlsSetup{ca: ca, server: cfg, pool: pool}
}

// client returns a client config presenting iss (nil: no certificate).
func (s *tlsSetup) client(t testing.TB, iss *pki.Issued) *tls.Config {
	t.Helper()
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.pool}
	if iss != nil {
		pair, err := tls.X509KeyPair(iss.CertPEM, iss.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		// Present it whatever CAs the collector asks for (a Go client
		// otherwise withholds a certificate the request's CA list does not
		// name, and a forger would not).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return cfg
}

func (s *tlsSetup) issue(t testing.TB, ca *pki.CA, cn string, from, until time.Time) *pki.Issued {
	t.Helper()
	iss, err := ca.Client(cn, from, until)
	if err != nil {
		t.Fatal(err)
	}
	return iss
}

// TestTLSRefusesForgedProducersWhileServingTheGoodOne: a producer with a
// valid client certificate streams events the whole time, while a client
// without a certificate, one with a certificate from another CA, one with an
// expired certificate and a plain-TCP client connect and are refused, each
// counted by its reason; the good producer's events all arrive, with
// src.node taken from its certificate, not from what it claims.
func TestTLSRefusesForgedProducersWhileServingTheGoodOne(t *testing.T) {
	s := newTLSSetup(t)
	c, rec := startCollectorAt(t, "tcp://127.0.0.1:0", ListenOptions{TLS: s.server, Run: "r"})
	now := time.Now()
	good := s.issue(t, s.ca, "prefill-host-1", now.Add(-time.Hour), now.Add(time.Hour))
	em, err := Dial(c.Addr(), DialOptions{TLS: s.client(t, good), Source: Source{Node: "i-claim-to-be-decode", Role: "prefill", Rank: 2}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			em.Emit(Event{Kind: KindReplay, TS: int64(i + 1), Body: &Replay{Step: uint64(i), Mode: ModeGraph}})
			if i%100 == 0 {
				time.Sleep(time.Millisecond) // keep the producer streaming while the others are refused
			}
		}
	}()

	other, err := pki.NewCA("another CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]*tls.Config{
		"tls_no_cert":    s.client(t, nil),
		"tls_unknown_ca": s.client(t, s.issue(t, other, "prefill-host-1", now.Add(-time.Hour), now.Add(time.Hour))),
		"tls_expired":    s.client(t, s.issue(t, s.ca, "prefill-host-1", now.Add(-48*time.Hour), now.Add(-time.Hour))),
	}
	for reason, cfg := range forged {
		// In TLS 1.3 the client finishes its side of the handshake before
		// the collector checks its certificate: the refusal shows as the
		// connection closing (or the handshake failing) on the client.
		tc, err := tls.Dial("tcp", strings.TrimPrefix(c.Addr(), "tcp://"), cfg)
		if err == nil {
			tc.Write([]byte(`{"v":1,"kind":"replay","src":{"node":"forged"},"body":{"mode":"graph"}}` + "\n"))
			tc.SetReadDeadline(time.Now().Add(10 * time.Second))
			var b [1]byte
			_, rerr := tc.Read(b[:])
			if rerr == nil {
				t.Errorf("%s: the collector sent data instead of closing", reason)
			}
			tc.Close()
		}
		testenv.WaitFor(t, reason+" refusal", func() bool { return c.Stats().RefusedBy[reason] == 1 })
	}
	plain := dialRaw(t, c)
	plain.Write([]byte(`{"v":1,"kind":"replay","body":{"mode":"graph"}}` + "\n"))
	testenv.WaitFor(t, "plain TCP refusal", func() bool { return c.Stats().RefusedBy["tls_handshake"] == 1 })

	wg.Wait()
	if err := em.Close(); err != nil {
		t.Fatal(err)
	}
	if st := em.Stats(); st.Sent != n {
		t.Fatalf("good producer sent %d of %d (%+v, %s)", st.Sent, n, st, em.LastError())
	}
	testenv.WaitFor(t, "every good event", func() bool { return len(rec.events()) == n })
	for _, ev := range rec.events() {
		if ev.Src.Node != "prefill-host-1" || ev.Src.Role != "prefill" || ev.Src.Rank != 2 {
			t.Fatalf("event src %+v: want node from the certificate, role and rank from the producer", ev.Src)
		}
		if r, ok := ev.Body.(*Replay); !ok || r.Mode != ModeGraph {
			t.Fatalf("forged event got through: %+v", ev)
		}
	}
	st := c.Stats()
	if st.Refused != 4 || st.Connections != 1 {
		t.Errorf("refused %d (%v), connections %d; want 4 refused, 1 connection", st.Refused, st.RefusedBy, st.Connections)
	}
	if !strings.Contains(st.LastRefusal, "tls_handshake") {
		t.Errorf("last refusal %q does not name its reason", st.LastRefusal)
	}
	if len(st.Conns) != 1 || st.Conns[0].Identity != "prefill-host-1" {
		t.Errorf("conns %+v: want one with identity prefill-host-1", st.Conns)
	}
}

// A non-loopback address needs TLS or the explicit insecure opt-in.
func TestTLSAllowsNonLoopback(t *testing.T) {
	if _, err := Listen("tcp://0.0.0.0:0", ListenOptions{}); !errors.Is(err, ErrRemoteRefused) {
		t.Fatalf("plain 0.0.0.0: %v, want ErrRemoteRefused", err)
	}
	s := newTLSSetup(t)
	c, err := Listen("tcp://0.0.0.0:0", ListenOptions{TLS: s.server})
	if err != nil {
		t.Fatalf("TLS 0.0.0.0: %v", err)
	}
	c.Close()
}

// The emitter reads KVCANARY_TLS_* for tcp:// addresses; a partial set is
// an error naming what is missing.
func TestTLSClientFromEnv(t *testing.T) {
	t.Setenv(EnvTLSCert, "/nonexistent/c.pem")
	t.Setenv(EnvTLSKey, "")
	t.Setenv(EnvTLSCA, "")
	if _, err := Dial("tcp://127.0.0.1:1", DialOptions{}); err == nil || !strings.Contains(err.Error(), EnvTLSKey) {
		t.Fatalf("partial TLS env: %v, want an error naming %s", err, EnvTLSKey)
	}
	t.Setenv(EnvTLSKey, "/nonexistent/k.pem")
	t.Setenv(EnvTLSCA, "/nonexistent/ca.pem")
	if _, err := Dial("tcp://127.0.0.1:1", DialOptions{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/c.pem") {
		t.Fatalf("missing files: %v, want an error naming the file", err)
	}
	// A Unix address ignores the TLS settings.
	em, err := Dial("unix://"+filepath.Join(t.TempDir(), "none.sock"), DialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	em.Close()
}

// TestTLSEmitterRefusedCountsNothingSent: in TLS 1.3 the client's handshake
// completes before the collector checks the client certificate, so the
// emitter must wait for the collector's verdict before it counts anything as
// sent. A producer whose certificate the collector refuses sends nothing,
// counts every event dropped, never counts a connection, names the TLS alert
// in LastError, and backs off (with a one-hour backoff it dials at most three
// times: in Dial, on the first event, and in Close).
func TestTLSEmitterRefusedCountsNothingSent(t *testing.T) {
	s := newTLSSetup(t)
	c, rec := startCollectorAt(t, "tcp://127.0.0.1:0", ListenOptions{TLS: s.server, Run: "r"})
	now := time.Now()
	other, err := pki.NewCA("another CA", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	evil := s.client(t, s.issue(t, other, "prefill-host-1", now.Add(-time.Hour), now.Add(time.Hour)))
	em, err := Dial(c.Addr(), DialOptions{TLS: evil, MinBackoff: time.Hour, MaxBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		em.Emit(Event{Kind: KindReplay, TS: int64(i + 1), Body: &Replay{Step: uint64(i), Mode: ModeGraph}})
	}
	testenv.WaitFor(t, "a refusal", func() bool { return c.Stats().RefusedBy["tls_unknown_ca"] >= 1 })
	em.Close()
	st := em.Stats()
	if st.Sent != 0 || st.Dropped != n || st.Connects != 0 {
		t.Errorf("refused producer: %+v; want sent 0, dropped %d, connects 0", st, n)
	}
	if le := em.LastError(); !strings.Contains(le, "unknown certificate authority") {
		t.Errorf("LastError %q does not carry the collector's TLS alert", le)
	}
	if got := len(rec.events()); got != 0 {
		t.Errorf("collector received %d events from a refused producer", got)
	}
	testenv.WaitFor(t, "the last refusal", func() bool { return c.Stats().Connections == 0 && c.Stats().Refused >= 1 })
	if r := c.Stats().Refused; r > 3 {
		t.Errorf("the refused producer dialled %d times with a one-hour backoff; want at most 3", r)
	}
}
