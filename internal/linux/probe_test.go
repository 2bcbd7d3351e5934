package linux_test

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/probe"
)

// TestLstatMountIDFollowsProbe checks that Lstat reports mount IDs exactly
// when the probe finds that statx gives them, and that SameMount, by mount
// ID or else by st_dev, puts a directory and its parent on one mount.
func TestLstatMountIDFollowsProbe(t *testing.T) {
	t.Setenv(probe.SimulateEnv, "")
	f, err := probe.Detect()
	if err != nil {
		t.Fatal(err)
	}
	if f.StatxMountID.Status == probe.Unknown {
		t.Fatalf("probe could not decide statx mount IDs: %+v", f.StatxMountID)
	}
	dir := t.TempDir()
	fd, err := unix.Open(filepath.Dir(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	st, err := linux.Lstat(fd, filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	if st.HasMountID != f.StatxMountID.OK() || st.HasMountID != (st.MountID != 0) {
		t.Errorf("Lstat: mount ID %d (has %v); probe: statx mount IDs %+v", st.MountID, st.HasMountID, f.StatxMountID)
	}
	self, err := linux.Lstat(fd, "")
	if err != nil {
		t.Fatal(err)
	}
	if self.HasMountID != st.HasMountID || !linux.SameMount(self, st) {
		t.Errorf("a directory and its parent on one mount: %+v and %+v", self, st)
	}
}
