package overlay

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestHashAhead reads an upper layer of large added and resized files
// (hashed beside the walk) and a same-size modified one (hashed in line,
// as its digest decides the change), with one file written after it was
// handed over: every digest is the content's, the bytes hashed add up,
// and the written file is left out with a reason, as in line.
func TestHashAhead(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	write := func(dir, name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	want := map[attest.Path][]byte{}
	var hashed uint64
	for i, n := range []int{hashAheadMin, 300 << 10, 1 << 20, 2<<20 + 1, 600 << 10} {
		name := string(rune('a'+i)) + ".bin"
		data := random(n)
		write(upper, name, data)
		want[attest.Path(name)] = data
		hashed += uint64(n)
	}
	write(lower, "resized.bin", random(400<<10))
	resized := random(500 << 10)
	write(upper, "resized.bin", resized)
	want["resized.bin"] = resized
	hashed += uint64(len(resized))
	same := random(300 << 10)
	write(lower, "same.bin", random(len(same)))
	write(upper, "same.bin", same)
	want["same.bin"] = same
	hashed += 2 * uint64(len(same))
	write(upper, "written.bin", random(400<<10))

	var handed []attest.Path
	hashAheadHanded = func(p attest.Path) {
		handed = append(handed, p)
		if p == "written.bin" {
			f, err := os.OpenFile(filepath.Join(upper, "written.bin"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("more"))
			f.Close()
		}
	}
	defer func() { hashAheadHanded = nil }()
	ch, err := Read(upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(handed)
	if w := []attest.Path{"a.bin", "b.bin", "c.bin", "d.bin", "e.bin", "resized.bin", "written.bin"}; !slices.Equal(handed, w) {
		t.Fatalf("handed over %q, want %q", handed, w)
	}
	for _, e := range ch.Entries {
		if e.Path == "written.bin" {
			t.Fatal("written.bin is listed although it changed while being hashed")
		}
		data, ok := want[e.Path]
		if !ok {
			continue
		}
		delete(want, e.Path)
		if sum := sha256.Sum256(data); !bytes.Equal(e.New.SHA256, sum[:]) {
			t.Errorf("%s: sha256 %x, want %x", e.Path, e.New.SHA256, sum)
		}
	}
	if len(want) != 0 {
		t.Errorf("not listed: %v", slices.Collect(func(yield func(attest.Path) bool) {
			for p := range want {
				yield(p)
			}
		}))
	}
	if ch.Stats.BytesHashed != hashed {
		t.Errorf("%d bytes hashed, want %d", ch.Stats.BytesHashed, hashed)
	}
	var reasons []string
	for _, r := range ch.Incomplete {
		if r.Path == "written.bin" {
			reasons = append(reasons, string(r.Code))
		}
	}
	if !slices.Equal(reasons, []string{string(attest.Vanished)}) {
		t.Errorf("reasons for written.bin: %q, want one %q (all: %+v)", reasons, attest.Vanished, ch.Incomplete)
	}
}
