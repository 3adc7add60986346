package input

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func gz(t testing.TB, s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func TestSniff(t *testing.T) {
	long := strings.Repeat("[2026-01-01 00:00:00] Decode batch. #running-req: 3\n", 400)
	tests := []struct {
		name string
		head []byte
		want Kind
	}{
		{"empty", nil, Empty},
		{"bundle", []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00}, Zstd},
		{"skippable frame", []byte{0x5e, 0x2a, 0x4d, 0x18, 0, 0, 0, 0}, Zstd},
		{"gzip", gz(t, "kv_canary violation: x\n"), Gzip},
		{"bzip2", []byte("BZh91AY&SY"), Bzip2},
		{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0, 0}, XZ},
		{"lz4", []byte{0x04, 0x22, 0x4d, 0x18, 0x64}, LZ4},
		{"zip", []byte("PK\x03\x04\x14\x00"), Zip},
		{"text log", []byte(long), Text},
		{"text cut in a rune", append([]byte(strings.Repeat("a", 100)), 0xe2, 0x80), Text},
		{"colour log", []byte("\x1b[32mINFO\x1b[0m ok\r\n\tmore\n"), Text},
		{"one odd byte", []byte("caf\xe9 latin-1 in a long enough line of text\n"), Text},
		{"zeros", make([]byte, 4096), Binary},
		{"log with a stray NUL", []byte(long[:2000] + "garbage \x00\x1b[2J\xff\xfe\n" + long[:2000]), Text},
		{"damaged bundle", []byte{0x29, 0xb5, 0x2f, 0xfd, 0x04, 0x00, 0x58}, Binary},
		{"random", []byte{0x9c, 0xff, 0x01, 0x02, 0x80, 0x81, 0xc3, 0x28, 0xa0, 0xa1, 0x03, 0x04}, Binary},
	}
	for _, tc := range tests {
		if got := Sniff(tc.head); got != tc.want {
			t.Errorf("%s: Sniff = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzSniff(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd})
	f.Add([]byte("plain text\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := Sniff(b)
		if k > Text {
			t.Fatalf("Sniff = %d, not a Kind", k)
		}
		if (k == Empty) != (len(b) == 0) {
			t.Fatalf("Sniff(%d bytes) = %v", len(b), k)
		}
		if k == Text && bytes.Count(b[:min(len(b), SniffBytes)], []byte{0})*32 > min(len(b), SniffBytes) {
			t.Fatalf("mostly NUL bytes sniffed as text")
		}
		// Only the first SniffBytes count.
		if len(b) > SniffBytes && Sniff(b[:SniffBytes]) != k {
			t.Fatalf("Sniff depends on bytes after SniffBytes")
		}
		e := &FormatError{Name: "f", Kind: k, Want: "x", ZstdAt: zstdAt(b)}
		if !strings.HasPrefix(e.Error(), "f: ") {
			t.Fatalf("error %q does not name the file", e.Error())
		}
	})
}

func write(t *testing.T, name string, b []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenReadsEveryByte(t *testing.T) {
	want := []byte(strings.Repeat("line of a log\n", 5000))
	in, err := Open(context.Background(), write(t, "a.log", want))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var got bytes.Buffer
	if _, err := got.ReadFrom(in); err != nil {
		t.Fatal(err)
	}
	if in.Kind != Text || !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("kind %v, %d bytes read, want text and %d", in.Kind, got.Len(), len(want))
	}
}

func TestExpectNamesFileAndKind(t *testing.T) {
	tests := []struct {
		data []byte
		want string
	}{
		{gz(t, "x\n"), "app.log.gz: gzip-compressed; run zcat first or pass the decompressed log"},
		{nil, "app.log.gz: empty file"},
		{make([]byte, 100), "app.log.gz: binary data, not a trace bundle"},
		{append([]byte{1, 2, 0, 4}, 0x28, 0xb5, 0x2f, 0xfd), "a zstd frame starts at byte 4"},
	}
	for _, tc := range tests {
		in, err := Open(context.Background(), write(t, "app.log.gz", tc.data))
		if err != nil {
			t.Fatal(err)
		}
		err = in.Expect("a trace bundle", Zstd)
		in.Close()
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Expect = %v, want a FormatError containing %q", err, tc.want)
		}
	}
}

// A FIFO nobody writes to blocks open(2); Open must still return when the
// context is cancelled.
func TestOpenFIFOWithoutWriterIsCancellable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Open(ctx, p)
		done <- err
	}()
	cancel()
	err := <-done
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Open = %v, want an interruption naming %s", err, p)
	}
}

// A read blocked on a FIFO whose writer sends nothing returns on cancel.
func TestReadBlockedOnFIFOIsCancellable(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
		}
		f.Write([]byte("first line\n"))
		w <- f
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		in, err := Open(ctx, p)
		if err == nil {
			var b bytes.Buffer
			_, err = b.ReadFrom(in)
			in.Close()
		}
		done <- err
	}()
	wf := <-w
	defer wf.Close()
	time.AfterFunc(10*time.Millisecond, cancel) // reader is (very likely) blocked by then; either way it must stop
	err := <-done
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("read = %v, want an interruption", err)
	}
}
