package tlog

import (
	"bytes"
	"testing"
)

// FuzzParseReceipt: a receipt file either is refused or re-encodes to
// exactly its bytes (one valid spelling).
func FuzzParseReceipt(f *testing.F) {
	r := &Receipt{Origin: "test.example/log", Index: 7, Entry: bytes.Repeat([]byte{0xab}, 32),
		Proof:      [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)},
		Checkpoint: []byte("test.example/log\n9\nAAAA\n\n— test.example/log AAAA\n")}
	f.Add(r.Marshal())
	f.Add([]byte(`{"format":"https://layerseal.dev/log-receipt/v1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseReceipt(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.Marshal(), b) {
			t.Fatalf("accepted %q, which re-encodes as %q", b, r.Marshal())
		}
	})
}

// FuzzOpenCheckpoint: any bytes as a checkpoint are refused without a
// panic unless the log's key signed them.
func FuzzOpenCheckpoint(f *testing.F) {
	f.Add([]byte("example.com/layerseal-log\n1\nAAAA\n\n— example.com/layerseal-log AAAA\n"))
	v, err := ParseVerifier("example.com/layerseal-log+d7509fdb+AbhIjrTOCea1qJneYhXcEKvArdudKYD0D2oiZyRfs+TW")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := OpenCheckpoint(b, v); err == nil {
			t.Fatalf("accepted %q", b)
		}
	})
}
