package attest_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// A key file that cannot be written whole is an error, and nothing is
// left behind: on a full filesystem the create succeeds and the write
// fails (ENOSPC), which GenerateKey must report.
func TestGenerateKeyOnFullFilesystem(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4k,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	// Fill the filesystem: one page, then ENOSPC.
	fill, err := os.Create(filepath.Join(dir, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := fill.Write(bytes.Repeat([]byte{'x'}, 1024)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	fill.Close()

	priv, pub := filepath.Join(dir, "seal.key"), filepath.Join(dir, "seal.key.pub")
	id, err := attest.GenerateKey(attest.AlgEd25519, priv, pub)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("GenerateKey on a full filesystem: key id %q, error %v; want ENOSPC", id, err)
	}
	for _, p := range []string{priv, pub} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after the failed write (%v)", filepath.Base(p), err)
		}
	}
}
