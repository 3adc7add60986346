package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// certs init prints the environment of every producer host it made a
// certificate for, each with its own pair (issue 23: only the first had a
// line).
func TestCertsInitPrintsEveryProducer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	out, _, err := runCmd(NewCmdCerts, "init", dir, "--client-names", "prefill-0,decode-0,decode-1")
	if err != nil {
		t.Fatalf("certs init: %v", err)
	}
	ca := filepath.Join(dir, "ca.pem")
	for _, name := range []string{"prefill-0", "decode-0", "decode-1"} {
		want := "producer " + name + ": KVCANARY_TLS_CERT=" + filepath.Join(dir, name+".pem") +
			" KVCANARY_TLS_KEY=" + filepath.Join(dir, name+"-key.pem") + " KVCANARY_TLS_CA=" + ca + "\n"
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\nproducer "); n != 3 {
		t.Errorf("%d producer lines, want 3:\n%s", n, out)
	}
}
