package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvcanary/kvcanary/checksum"
	"github.com/kvcanary/kvcanary/internal/cmdutil"
	"github.com/kvcanary/kvcanary/internal/pki"
	"github.com/kvcanary/kvcanary/internal/testenv"
	"github.com/kvcanary/kvcanary/runtime/hook"
	"github.com/kvcanary/kvcanary/spec/kvlayout"
	"github.com/kvcanary/kvcanary/traces"
)

// pdRooms is the workload of the two-host PD check: rooms 1..n, each with a
// prefill and a decode digest; faulty's decode digest differs (an injected
// transfer fault).
const pdRooms = 64

func pdEvent(room uint64, side hook.Side, faulty bool) hook.Event {
	b, x := kvlayout.Mix64(room), kvlayout.Mix64(room+1)
	if faulty {
		b ^= 1 << 17
	}
	return hook.Event{Kind: hook.KindRoomChecksum, TS: time.Now().UnixNano(), Body: &hook.RoomChecksum{
		Room: hook.Dec64(1<<62 + room), Side: side, SeqLen: 100 + int(room), Pages: 2, Bsum: hook.Hex64(b), XXH3: hook.Hex64(x), Rank: 1, Stage: stageOf(side)}}
}

func stageOf(side hook.Side) string {
	if side == hook.SidePrefill {
		return "sent"
	}
	return "transferred"
}

func certsInit(t *testing.T, dir string, names ...string) {
	t.Helper()
	out, _, err := runCmd(NewCmdCerts, "init", dir, "--client-names", strings.Join(names, ","))
	if err != nil {
		t.Fatalf("certs init: %v", err)
	}
	if !strings.Contains(out, "--tls-cert "+filepath.Join(dir, "server.pem")) {
		t.Errorf("certs init output lacks the collector flags:\n%s", out)
	}
}

func clientTLS(t *testing.T, dir, name string) *tls.Config {
	t.Helper()
	c, k := pki.ClientFiles(name)
	cfg, err := hook.ClientTLSConfig(filepath.Join(dir, c), filepath.Join(dir, k), filepath.Join(dir, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFleetTwoHostPDOverMTLS is issue 16's two-host PD check on one machine:
// a prefill producer and a decode producer, each with its own client
// certificate, feed one collector over mTLS on loopback TCP; a forged
// producer (another CA, claiming to be the decode host) is refused; the
// decode side has one faulty transfer. The recorded bundle's checksum
// compare attributes the mismatch to the right hosts, role and rank.
func TestFleetTwoHostPDOverMTLS(t *testing.T) {
	dir := t.TempDir()
	pkiDir := filepath.Join(dir, "pki")
	certsInit(t, pkiDir, "prefill-host", "decode-host")
	forgedDir := filepath.Join(dir, "forged")
	certsInit(t, forgedDir, "decode-host")
	bundle := filepath.Join(dir, "pd.kvtrace")

	ios, _, out, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now}, JSON: &cmdutil.JSONFlags{JSON: true},
		Listen: "tcp://127.0.0.1:0", Record: bundle, Run: "pd",
		TLS: listenTLS{Cert: filepath.Join(pkiDir, "server.pem"), Key: filepath.Join(pkiDir, "server-key.pem"), ClientCA: filepath.Join(pkiDir, "ca.pem")}}
	c, stop := runCollect(t, opts)
	addr := c.Addr()

	const faultyRoom = 23
	var wg sync.WaitGroup
	produce := func(host string, tlsDir string, src hook.Source, side hook.Side) {
		defer wg.Done()
		cfg := clientTLS(t, tlsDir, host)
		if tlsDir == forgedDir {
			// The forger trusts the collector (its CA certificate is no
			// secret) and presents its own certificate whatever CAs the
			// collector asks for.
			cfg.RootCAs = clientTLS(t, pkiDir, "prefill-host").RootCAs
			own := cfg.Certificates[0]
			cfg.Certificates = nil
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &own, nil }
		}
		em, err := hook.Dial(addr, hook.DialOptions{TLS: cfg, Source: src, FlushTimeout: time.Minute})
		if err != nil {
			t.Error(err)
			return
		}
		for room := uint64(1); room <= pdRooms; room++ {
			faulty := side == hook.SideDecode && room == faultyRoom
			if tlsDir == forgedDir {
				faulty = room%2 == 0 // the forger would fabricate mismatches
			}
			em.Emit(pdEvent(room, side, faulty))
		}
		if err := em.Close(); err != nil {
			t.Error(err)
		}
	}
	wg.Add(3)
	go produce("prefill-host", pkiDir, hook.Source{Node: "prefill-host", Role: "prefill", Rank: 1}, hook.SidePrefill)
	go produce("decode-host", pkiDir, hook.Source{Node: "lies-about-its-name", Role: "decode", Rank: 1}, hook.SideDecode)
	go produce("decode-host", forgedDir, hook.Source{Node: "decode-host", Role: "decode", Rank: 1}, hook.SideDecode)
	wg.Wait()
	testenv.WaitForState(t, "both hosts' rooms and the forged certificate's refusal", func() bool {
		return c.Stats().Events >= 2*pdRooms && c.Stats().RefusedBy["tls_unknown_ca"] > 0
	}, func() any { return c.Stats() })
	sum := stopCollectJSON(t, stop, out, errOut)
	if !strings.Contains(sum.LastRefusal, "tls_unknown_ca") {
		t.Errorf("last refusal %q does not name the cause", sum.LastRefusal)
	}
	if sum.Events != 2*pdRooms || sum.Connections != 2 || sum.RefusedBy["tls_unknown_ca"] < 1 {
		t.Fatalf("collect summary: %d events, %d connections, refused %v; want %d, 2 and the forger refused", sum.Events, sum.Connections, sum.RefusedBy, 2*pdRooms)
	}

	// The recorded bundle, compared: one mismatch, from prefill-host rank 1
	// to decode-host rank 1 (the CN, not the name the producer claimed).
	text, _, err := runChecksumCompare(t, false, false, bundle)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding {
		t.Fatalf("checksum compare: %v (exit %d), want a finding\n%s", err, cmdutil.ExitCode(err), text)
	}
	if !strings.Contains(text, "63/64 rooms match; 1 mismatch") ||
		!strings.Contains(text, "prefill-host prefill r1 → decode-host decode r1") {
		t.Errorf("compare does not attribute the mismatch to the hosts:\n%s", text)
	}
	t.Logf("checksum compare of the recorded bundle:\n%s", text)
	if strings.Contains(text, "lies-about-its-name") {
		t.Errorf("a producer-claimed host name got through:\n%s", text)
	}
	js, _, _ := runChecksumCompare(t, false, true, bundle)
	var rep checksum.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"prefill-host/prefill": 1, "decode-host/decode": 1}
	if len(rep.Producers) != 2 {
		t.Fatalf("producers %+v", rep.Producers)
	}
	for _, p := range rep.Producers {
		if want[p.Node+"/"+string(p.Role)] != p.Classes.Mismatch || p.Rank != 1 || p.Rooms != pdRooms {
			t.Errorf("producer %+v: want %d mismatch of %d rooms at rank 1", p, want[p.Node+"/"+string(p.Role)], pdRooms)
		}
	}
	if len(rep.NonMatching) != 1 || uint64(rep.NonMatching[0].Room) != 1<<62+faultyRoom ||
		rep.NonMatching[0].DecodeFrom == nil || rep.NonMatching[0].DecodeFrom.Node != "decode-host" {
		t.Errorf("non-matching %+v", rep.NonMatching)
	}
}

// TestFleetMergeThenCompare: the same run recorded as two bundles, one per
// host; trace merge makes one, and checksum compare of the merge finds the
// mismatch with its hosts; the merge reports the clock offset it estimated.
func TestFleetMergeThenCompare(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Now()
	write := func(host string, side hook.Side, created time.Time) string {
		p := filepath.Join(dir, host+".kvtrace")
		w, err := traces.Create(p, traces.Manifest{Host: hook.HostInfo{Hostname: host}, Run: "pd-" + host, Created: created})
		if err != nil {
			t.Fatal(err)
		}
		for room := uint64(1); room <= pdRooms; room++ {
			ev := pdEvent(room, side, side == hook.SideDecode && room == 5)
			ev.Src = hook.Source{Node: host, Role: string(side), Rank: 1}
			if err := w.Write(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("prefill-host", hook.SidePrefill, t0)
	b := write("decode-host", hook.SideDecode, t0.Add(250*time.Millisecond))
	merged := filepath.Join(dir, "all.kvtrace")
	out, errOut, err := runCmd(NewCmdTraceMerge, a, b, "-o", merged)
	if err != nil {
		t.Fatalf("trace merge: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "merged 128 events from 2 bundles") || !strings.Contains(out, "+250ms") ||
		!strings.Contains(out, "not applied") {
		t.Errorf("merge report does not show the events and the estimated offset:\n%s", out)
	}
	text, _, err := runChecksumCompare(t, false, false, merged)
	if cmdutil.ExitCode(err) != cmdutil.ExitFinding || !strings.Contains(text, "prefill-host prefill r1 → decode-host decode r1") {
		t.Fatalf("compare of the merged bundle: %v\n%s", err, text)
	}
	// -o naming an input is refused before anything is written.
	if _, _, err := runCmd(NewCmdTraceMerge, a, b, "-o", a); cmdutil.ExitCode(err) != cmdutil.ExitUsage {
		t.Fatalf("-o an input: %v", err)
	}
	if fi, err := os.Stat(a); err != nil || fi.Size() == 0 {
		t.Fatalf("input damaged: %v", err)
	}
}

// --insecure-remote warns on every start; a partial TLS flag set is a usage
// error; --allow-remote still works, as a deprecated alias.
func TestCollectInsecureRemoteWarnsAndTLSFlagsGoTogether(t *testing.T) {
	ios, _, _, errOut := cmdutil.Test()
	opts := &CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Now: time.Now}, JSON: &cmdutil.JSONFlags{},
		Listen: "tcp://127.0.0.1:0", AllowRemote: true}
	_, stop := runCollect(t, opts)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "WARNING: --insecure-remote") {
		t.Errorf("no warning on start:\n%s", errOut)
	}
	ios, _, _, _ = cmdutil.Test()
	err := collectRun(&CollectOptions{IO: ios, Factory: &cmdutil.Factory{IO: ios, Ctx: context.Background(), Now: time.Now}, JSON: &cmdutil.JSONFlags{},
		Listen: "tcp://127.0.0.1:0", TLS: listenTLS{Cert: "c.pem"}})
	if cmdutil.ExitCode(err) != cmdutil.ExitUsage || !strings.Contains(err.Error(), "go together") {
		t.Errorf("partial TLS flags: %v", err)
	}
	if got, err := parseCmd(NewCmdCollect, "--listen", "tcp://0.0.0.0:1", "--allow-remote"); err != nil || !got.AllowRemote {
		t.Errorf("--allow-remote alias: %v %+v", err, got)
	}
}
