// Package statxfloor gives benchmarks the floor of any probe that stats
// every entry of a directory tree: one bare statx per entry, spread over
// locked OS threads, with every directory already open and every name
// already known. No such probe can be cheaper, so a benchmark that runs
// Tree.Stat beside a probe shows how far the probe is from its floor.
package statxfloor

import (
	"fmt"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Tree is every entry below a root, each named by its open directory.
type Tree struct {
	fds     []int
	entries []entry
}

type entry struct {
	dir  int
	name string
}

// Open opens every directory below root, not following symlinks, and
// lists their entries. Close releases the directories.
func Open(root string) (*Tree, error) {
	fd, err := linux.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", root, err)
	}
	t := &Tree{}
	if err := t.add(fd); err != nil {
		t.Close()
		return nil, fmt.Errorf("open %q: %w", root, err)
	}
	return t, nil
}

func (t *Tree) add(fd int) error {
	t.fds = append(t.fds, fd)
	names, err := linux.ReadDirNamesMax(fd, 0)
	if err != nil {
		return err
	}
	for _, name := range names {
		t.entries = append(t.entries, entry{fd, name})
		st, err := linux.Lstat(fd, name)
		if err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := linux.OpenBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				return err
			}
			if err := t.add(sub); err != nil {
				return err
			}
		}
	}
	return nil
}

// Len is the number of entries below the root.
func (t *Tree) Len() int { return len(t.entries) }

// Stat stats every entry once, as a probe does (no symlink followed, the
// same mask), on threads locked OS threads, each taking an equal share.
func (t *Tree) Stat(threads int) error {
	threads = max(threads, 1)
	errs := make([]error, threads)
	var wg sync.WaitGroup
	for w := range threads {
		part := t.entries[w*len(t.entries)/threads : (w+1)*len(t.entries)/threads]
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var sx unix.Statx_t
			for _, e := range part {
				if err := unix.Statx(e.dir, e.name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_NO_AUTOMOUNT|unix.AT_STATX_SYNC_AS_STAT, linux.StatxMask, &sx); err != nil {
					errs[w] = fmt.Errorf("statx %q: %w", e.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close closes the directories.
func (t *Tree) Close() {
	for _, fd := range t.fds {
		unix.Close(fd)
	}
	t.fds = nil
}
