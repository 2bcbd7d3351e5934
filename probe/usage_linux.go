package probe

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Usage is the disk space a tree takes.
type Usage struct {
	Bytes   int64 // allocated: st_blocks × 512 of every inode, each once
	Entries int64 // entries counted, the roots included
}

// DiskUsage measures the disk space the trees at roots take, as du does:
// the blocks allocated to every entry (directories too, each hard-linked
// inode once, a sparse file's holes not at all), from statx alone (one
// getdents per directory, one statx per entry, fd-relative, never
// following a symlink, not descending into other mounts). It costs about
// one statx per entry and one directory fd per level of depth, and holds
// one getdents buffer per level and the inode numbers of hard-linked
// files.
//
// Entries that vanish or are swapped while it walks are skipped: on a
// tree that changes while it is measured the figure is what the walk saw,
// not a snapshot. Any other failure (a root that cannot be opened, a
// directory that cannot be read, too many open files) is an error.
func DiskUsage(roots ...string) (Usage, error) {
	var u Usage
	linked := map[uint64]bool{}
	for _, root := range roots {
		fd, err := linux.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			return u, fmt.Errorf("measure %q: %w", root, err)
		}
		st, err := linux.Lstat(fd, "")
		if err == nil {
			u.Bytes += int64(st.Blocks) * 512
			u.Entries++
			err = usageOf(fd, st.Dev, &u, linked)
		}
		linux.Close(fd)
		if err != nil {
			return u, fmt.Errorf("measure %q: %w", root, err)
		}
	}
	return u, nil
}

// usageOf adds what lies in the directory open at fd, on device dev, to u.
func usageOf(fd int, dev uint64, u *Usage, linked map[uint64]bool) error {
	return linux.ReadDirEach(fd, func(name string) error {
		st, err := linux.Lstat(fd, name)
		if raced(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Dev != dev {
			return nil // another mount: not this tree's space
		}
		u.Entries++
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if st.Nlink > 1 {
				if linked[st.Ino] {
					return nil
				}
				linked[st.Ino] = true
			}
			u.Bytes += int64(st.Blocks) * 512
			return nil
		}
		u.Bytes += int64(st.Blocks) * 512
		sub, err := linux.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if raced(err) {
			return nil
		}
		if err != nil {
			return err
		}
		defer linux.Close(sub)
		return usageOf(sub, dev, u, linked)
	})
}

// raced reports whether err means the entry vanished or was swapped for
// another kind of entry between its listing and its stat or open.
func raced(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ESTALE)
}
