package linux

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFileWatch checks that Wait wakes on a write, at once rather than at
// its timeout, and times out when nothing was written.
func TestFileWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events")
	if err := os.WriteFile(path, []byte("populated 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := WatchModify(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := time.Now()
	if w.Wait(50 * time.Millisecond) {
		t.Fatal("Wait saw a modification before any write")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Wait returned after %v, before its timeout of 50ms", d)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		time.Sleep(20 * time.Millisecond)
		os.WriteFile(path, []byte("populated 0\n"), 0o600) // truncate and write: two events
	}()
	start = time.Now()
	if !w.Wait(10 * time.Second) {
		t.Fatal("Wait missed the write")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait took %v to see a write made after 20ms", d)
	}
	// Once what was written is consumed, a new Wait times out again.
	<-written
	w.Wait(10 * time.Millisecond)
	if w.Wait(10 * time.Millisecond) {
		t.Fatal("Wait saw the same modification twice")
	}
	if _, err := WatchModify(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("watching a missing file succeeded")
	}
}
