package probe

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// MappedWritesStamped reports whether the filesystem holding dir stamps a
// file's ctime when it is written through a shared mapping after its
// dirty pages were written back. A write through a mapping whose page is
// already dirty and writable stamps nothing, on any filesystem; writing
// the pages back write-protects the mapping again, and filesystems that
// are told of the next write (ext4, xfs, btrfs: page_mkwrite) stamp it
// then. Filesystems without writeback, such as tmpfs, never stamp a
// write through a mapping, so no stat tells such a write apart.
//
// It finds out by trying, in a scratch file in dir that it removes:
// write through a mapping, write back, wait out a clock tick, write
// again, and compare ctimes. It takes about one RacyWindow.
func MappedWritesStamped(dir string) (bool, error) {
	f, err := os.CreateTemp(dir, ".layerseal-mapped-")
	if err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	page := os.Getpagesize()
	if err := f.Truncate(int64(page)); err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	defer unix.Munmap(m)
	m[0] = 1
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	before, err := linux.Lstat(int(f.Fd()), "")
	if err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	for deadline := time.Now().Add(time.Second); linux.CoarseNow().UnixNano() <= before.CtimeNS+int64(RacyWindow()/2) && time.Now().Before(deadline); {
		time.Sleep(RacyWindow() / 4)
	}
	m[1] = 1
	after, err := linux.Lstat(int(f.Fd()), "")
	if err != nil {
		return false, fmt.Errorf("probe mapped writes: %w", err)
	}
	return after.CtimeNS != before.CtimeNS, nil
}
