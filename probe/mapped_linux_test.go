package probe

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

func TestMappedWritesStamped(t *testing.T) {
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	got, err := MappedWritesStamped(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := fs.Type != unix.TMPFS_MAGIC && fs.Type != unix.RAMFS_MAGIC; got != want {
		t.Errorf("mapped writes stamped on filesystem %#x: %t, want %t", fs.Type, got, want)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("scratch file left: %v", names)
	}
}

// On tmpfs a write through a mapping never stamps ctime.
func TestMappedWritesUnstampedOnTmpfs(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if got, err := MappedWritesStamped(dir); err != nil || got {
		t.Errorf("tmpfs: stamped %t, %v; want false", got, err)
	}
}
