package layerseal_test

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/internal/privtest"
)

// benchTree makes a workspace of n files (100 per directory, 1 KiB each)
// and an upper layer holding a change set of 100: 34 modified files, 33
// added files and 33 deletions (whiteouts), as an overlay would leave it.
func benchTree(b *testing.B, n int) (lower, upper, work string) {
	b.Helper()
	privtest.Require(b)
	root := b.TempDir()
	lower, upper, work = filepath.Join(root, "lower"), filepath.Join(root, "upper"), filepath.Join(root, "work")
	content := make([]byte, 1024)
	for i := 0; i < n; i++ {
		dir := filepath.Join(lower, fmt.Sprintf("d%04d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		content[0] = byte(i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i%100)), content, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, d := range []string{upper, work, filepath.Join(upper, "d0000")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 34 {
		os.WriteFile(filepath.Join(upper, "d0000", fmt.Sprintf("f%03d", i)), []byte("modified"), 0o644)
		if i == 33 {
			break
		}
		os.WriteFile(filepath.Join(upper, "d0000", fmt.Sprintf("new%03d", i)), []byte("added"), 0o644)
		if err := unix.Mknod(filepath.Join(upper, "d0000", fmt.Sprintf("f%03d", 50+i)), unix.S_IFCHR|0o600, 0); err != nil {
			b.Fatal(err)
		}
	}
	return lower, upper, work
}

// fullWalk is what tools without an upper layer do: hash every file of the
// workspace (run twice, before and after the agent).
func fullWalk(root string) (int, error) {
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		_, err = io.Copy(h, f)
		files++
		return err
	})
	return files, err
}

// benchSizes are the workspace and upper-layer sizes the benchmarks run
// at: one small size under -short (scripts/bench-smoke), which checks only
// that they still run.
func benchSizes() []int {
	if testing.Short() {
		return []int{1_000}
	}
	return []int{10_000, 100_000, 1_000_000}
}

// BenchmarkFinalAttestation compares, side by side, layerseal's final
// attestation of a change set of 100 with a full before-and-after sha256
// walk of the same workspace, for workspaces of 10,000, 100,000 and
// 1,000,000 files (the full walk up to 100,000: the largest shows only
// that the attestation stays flat). Run with LAYERSEAL_PRIVILEGED=1 (the upper
// layer holds whiteouts); bench/attest prints the comparison table.
func BenchmarkFinalAttestation(b *testing.B) {
	for _, n := range benchSizes() {
		lower, upper, work := benchTree(b, n)
		b.Run(fmt.Sprintf("files=%d/layerseal", n), func(b *testing.B) {
			for b.Loop() {
				st, err := layerseal.Attest(upper, work, lower, layerseal.DefaultPolicy, false)
				if err != nil {
					b.Fatal(err)
				}
				if len(st.Entries) < 100 || len(st.Incomplete) != 0 {
					b.Fatalf("%d entries, %v", len(st.Entries), st.Incomplete)
				}
			}
		})
		if n > 100_000 {
			continue // the full walk's cost is clear by then; this row is for flatness
		}
		b.Run(fmt.Sprintf("files=%d/full-walk", n), func(b *testing.B) {
			for b.Loop() {
				for range 2 {
					if got, err := fullWalk(lower); err != nil || got != n {
						b.Fatal(got, err)
					}
				}
			}
		})
	}
}
