package overlay

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// CheckUpperDir reports whether the directory dir lies on a filesystem
// that can hold an overlay's upper layer, by trying what one needs: a
// whiteout (char 0:0) and a trusted xattr; and that it is not itself an
// overlay. It leaves dir as it found it.
func CheckUpperDir(dir string) error {
	fd, err := linux.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return err
	}
	defer linux.Close(fd)
	const whiteout = "whiteout-check"
	if err := linux.Mknodat(fd, whiteout, unix.S_IFCHR|0o600, 0); err != nil {
		return fmt.Errorf("mknod whiteout: %w", err)
	}
	linux.Unlinkat(fd, whiteout, 0)
	const xattr = "trusted.overlay.check"
	if err := linux.Setxattr(fd, xattr, []byte("y")); err != nil {
		return fmt.Errorf("set trusted xattr: %w", err)
	}
	linux.Removexattr(fd, xattr)
	fs, err := linux.Fstatfs(fd)
	if err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	if fs.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return errors.New("it is itself an overlay")
	}
	return nil
}
