package overlay

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkFinalHash reads an upper layer of new large files (20 of 100
// MiB; 4 of 1 MiB under -short), warm in the page cache, as the final walk
// does ("read"), beside hashing the same files one after another on one
// core ("one-core"). bench/hash prints them with sha256sum's time.
// LAYERSEAL_HASH_BENCH_DIR, when set, keeps the files there for that
// script.
func BenchmarkFinalHash(b *testing.B) {
	files, size := 20, 100<<20
	if testing.Short() {
		files, size = 4, 1<<20
	}
	upper := os.Getenv("LAYERSEAL_HASH_BENCH_DIR")
	if upper == "" {
		upper = b.TempDir()
	}
	lower := b.TempDir()
	var names []string
	for i := range files {
		name := filepath.Join(upper, fmt.Sprintf("f%02d.bin", i))
		names = append(names, name)
		if fi, err := os.Stat(name); err == nil && fi.Size() == int64(size) {
			continue
		}
		f, err := os.Create(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.CopyN(f, rand.Reader, int64(size)); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	total := int64(files) * int64(size)
	b.Run("read", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			ch, err := Read(upper, lower, ReadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if ch.Stats.BytesHashed != uint64(total) {
				b.Fatalf("%d bytes hashed, want %d", ch.Stats.BytesHashed, total)
			}
		}
	})
	b.Run("one-core", func(b *testing.B) {
		b.SetBytes(total)
		buf := make([]byte, digestBufSize)
		for b.Loop() {
			for _, name := range names {
				f, err := os.Open(name)
				if err != nil {
					b.Fatal(err)
				}
				h := sha256.New()
				if _, err := io.CopyBuffer(h, f, buf); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		}
	})
}
