package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestApplyCopy copies files on both sides of applySmall, with and
// without holes, and files longer or shorter than the size asked for.
func TestApplyCopy(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int64{0, 1, 4095, applySmall, applySmall + 1, 3 << 20} {
		for _, hole := range []bool{false, true} {
			t.Run(fmt.Sprintf("size=%d/hole=%v", size, hole), func(t *testing.T) {
				want := make([]byte, size)
				for i := range want {
					want[i] = byte(i*7 + 1)
				}
				if hole && size > 2 {
					clear(want[size/4 : size/2]) // written as a hole below
				}
				src := filepath.Join(dir, fmt.Sprintf("src-%d-%v", size, hole))
				writeWithHole(t, src, want, hole)
				for _, tc := range []struct {
					name string
					ask  int64
					ok   bool
				}{{"exact", size, true}, {"file longer", size - 1, false}, {"file shorter", size + 1, false}} {
					if tc.ask < 0 {
						continue
					}
					in := openFile(t, src, os.O_RDONLY)
					dstPath := filepath.Join(dir, "dst")
					os.Remove(dstPath)
					out := openFile(t, dstPath, os.O_RDWR|os.O_CREATE|os.O_EXCL)
					h := sha256.New()
					err := applyCopy(int(out.Fd()), int(in.Fd()), tc.ask, h)
					in.Close()
					out.Close()
					if !tc.ok {
						if !errors.Is(err, ErrNotAttested) {
							t.Errorf("%s: %v, want ErrNotAttested", tc.name, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					got, err := os.ReadFile(dstPath)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%s: copy differs (%d bytes, want %d)", tc.name, len(got), len(want))
					}
					if sum := sha256.Sum256(want); !bytes.Equal(h.Sum(nil), sum[:]) {
						t.Errorf("%s: hash differs", tc.name)
					}
				}
			})
		}
	}
}

// writeWithHole writes data to path, leaving its zero middle quarter a
// hole when hole is set.
func writeWithHole(t *testing.T, path string, data []byte, hole bool) {
	t.Helper()
	f := openFile(t, path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	defer f.Close()
	n := int64(len(data))
	if !hole || n <= 2 {
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, err := f.WriteAt(data[:n/4], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[n/2:], n/2); err != nil {
		t.Fatal(err)
	}
}

func openFile(t *testing.T, path string, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
