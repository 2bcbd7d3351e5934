package removetree

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

// mustWrite writes a small file, making its directory.
func mustWrite(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveAllTree(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	mustWrite(t, filepath.Join(outside, "keep"))
	tree := filepath.Join(base, "tree")
	// Many files in a few directories (several tasks per directory),
	// deep and empty directories, odd names, and symlinks that point
	// out of the tree, which must be removed, not followed.
	for d := range 5 {
		for f := range 300 {
			mustWrite(t, filepath.Join(tree, fmt.Sprint(d), fmt.Sprint("f", f)))
		}
	}
	deep := tree
	for i := range 40 {
		deep = filepath.Join(deep, fmt.Sprint("d", i))
	}
	mustWrite(t, filepath.Join(deep, "leaf"))
	if err := os.MkdirAll(filepath.Join(tree, "empty", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(tree, "new\nline", "bad\xff"))
	for _, link := range []string{"0/out", "d0/out-dir", "empty/out-file"} {
		target := outside
		if link == "empty/out-file" {
			target = filepath.Join(outside, "keep")
		}
		if err := os.Symlink(target, filepath.Join(tree, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(tree); err != nil {
		t.Fatalf("RemoveAll: %v", err)
	}
	if _, err := os.Lstat(tree); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("tree still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("a file outside the tree was touched through a symlink: %v", err)
	}
}

func TestRemoveAllNotDir(t *testing.T) {
	base := t.TempDir()
	if err := RemoveAll(filepath.Join(base, "missing")); err != nil {
		t.Fatalf("a missing path: %v, want nil", err)
	}
	mustWrite(t, filepath.Join(base, "dir", "keep"))
	link := filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(base, "dir"), link); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(link); err != nil {
		t.Fatalf("a symlink: %v", err)
	}
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("symlink still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "dir", "keep")); err != nil {
		t.Fatalf("the symlink's target was removed: %v", err)
	}
	file := filepath.Join(base, "dir", "keep")
	if err := RemoveAll(file); err != nil {
		t.Fatalf("a file: %v", err)
	}
	if _, err := os.Lstat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
}

// TestRemoveAllMount: a directory of the tree with something mounted on
// it is an error; nothing of the mounted filesystem is removed.
func TestRemoveAllMount(t *testing.T) {
	privtest.Require(t)
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	mnt := filepath.Join(tree, "a", "mnt")
	mustWrite(t, filepath.Join(tree, "a", "file"))
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	mustWrite(t, filepath.Join(mnt, "mounted"))
	err := RemoveAll(tree)
	if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EBUSY) {
		t.Fatalf("RemoveAll over a mount: %v, want EXDEV or EBUSY", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "mounted")); err != nil {
		t.Fatalf("a file of the mounted filesystem was removed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(tree, "a", "file")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the rest of the tree was left: %v", err)
	}
}
