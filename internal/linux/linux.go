// Package linux holds the few syscall wrappers that several layerseal
// packages share: fd-relative opening that never follows a symlink, statx
// with mount IDs, and extended attributes read through file descriptors.
// Every wrapper retries EINTR and returns errors that name the operation,
// the path and, where they matter, the flags.
package linux

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ignoringEINTR calls fn until it returns something other than EINTR.
func ignoringEINTR(fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// pathErr wraps a syscall error with the operation and the path.
func pathErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

var openat2Missing atomic.Bool

// Openat2Available reports whether openat2 has not (yet) failed with ENOSYS.
func Openat2Available() bool { return !openat2Missing.Load() }

// DisableOpenat2 makes OpenBeneath use its O_NOFOLLOW fallback from now on,
// as on a kernel without openat2 (tests and simulated probes use it).
func DisableOpenat2() { openat2Missing.Store(true) }

// OpenBeneath opens name relative to dirfd without following any symlink
// and without leaving dirfd's mount or subtree: with openat2
// (RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS)
// where the kernel has it, otherwise by walking name one component at a time
// with O_NOFOLLOW. name must be relative; "." opens dirfd again; a name of
// PATH_MAX bytes or more is opened in parts. O_CLOEXEC and O_NOFOLLOW are
// always added.
func OpenBeneath(dirfd int, name string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if name == "" || name[0] == '/' || hasDotDot(name) {
		return -1, pathErr("open", name, unix.EXDEV)
	}
	if len(name) >= unix.PathMax {
		// Too long for one call: open a leading part that fits, and the
		// rest beneath it. Every part is resolved under the same rules.
		i := strings.LastIndexByte(name[:unix.PathMax-1], '/')
		if i <= 0 {
			return -1, pathErr("open", name, unix.ENAMETOOLONG)
		}
		dir, err := OpenBeneath(dirfd, name[:i], unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return -1, err
		}
		defer unix.Close(dir)
		return OpenBeneath(dir, name[i+1:], flags)
	}
	if !openat2Missing.Load() {
		how := unix.OpenHow{
			Flags:   uint64(flags),
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
		}
		var fd int
		err := ignoringEINTR(func() (err error) {
			fd, err = unix.Openat2(dirfd, name, &how)
			return err
		})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, pathErr("openat2", name, err)
		}
		openat2Missing.Store(true)
	}
	return openComponents(dirfd, name, flags)
}

// hasDotDot reports whether the slash-separated name has a ".." component.
func hasDotDot(name string) bool {
	for comp := range strings.SplitSeq(name, "/") {
		if comp == ".." {
			return true
		}
	}
	return false
}

// openComponents is OpenBeneath's fallback: every component is opened on
// its own with O_NOFOLLOW (intermediate ones O_PATH|O_DIRECTORY), so a
// symlink anywhere fails with ELOOP or ENOTDIR; ".." is refused, and a
// component on another mount than dirfd fails with EXDEV.
func openComponents(dirfd int, name string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if name == "" || name[0] == '/' || hasDotDot(name) {
		return -1, pathErr("open", name, unix.EXDEV)
	}
	home, err := Lstat(dirfd, "")
	if err != nil {
		return -1, pathErr("open", name, errors.Unwrap(err))
	}
	cur := dirfd
	closeCur := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	rest := name
	for {
		comp, after, more := strings.Cut(rest, "/")
		rest = after
		if (comp == "" || comp == ".") && more {
			continue
		}
		if comp == "" {
			comp = "."
		}
		f := unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if !more {
			f = flags
		}
		next, err := Openat(cur, comp, f)
		closeCur()
		if err != nil {
			return -1, pathErr("open", name, errors.Unwrap(err))
		}
		cur = next
		st, err := Lstat(cur, "")
		if err == nil && !SameMount(home, st) {
			err = unix.EXDEV
		} else if err != nil {
			err = errors.Unwrap(err)
		}
		if err != nil {
			closeCur()
			return -1, pathErr("open", name, err)
		}
		if !more {
			return cur, nil
		}
	}
}

// SameMount reports whether a and b are on the same mount: by mount ID when
// both have one, otherwise by st_dev (which cannot tell bind mounts of one
// filesystem apart).
func SameMount(a, b Stat) bool {
	if a.HasMountID && b.HasMountID {
		return a.MountID == b.MountID
	}
	return a.Dev == b.Dev
}

// Reopen opens the file that fd (typically an O_PATH descriptor whose
// identity was already checked) refers to, through /proc/self/fd, so the
// file opened is that inode and no other, whatever its name now points to.
// O_CLOEXEC is always added.
func Reopen(fd int, flags int) (int, error) {
	return Openat(unix.AT_FDCWD, procFD(fd), flags)
}

// ReadDirNamesMax is ReadDirNames with a bound: when limit > 0 it stops
// once it has more than limit names, so a caller learns that a directory
// is over its limit without holding all of it.
func ReadDirNamesMax(fd int, limit int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for limit <= 0 || len(names) <= limit {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Getdents(fd, buf)
			return err
		})
		if err != nil {
			return nil, pathErr("getdents", procFD(fd), err)
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	return names, nil
}

// Openat is openat(2) with EINTR retried; O_CLOEXEC is always added.
func Openat(dirfd int, name string, flags int) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, 0)
		return err
	})
	return fd, pathErr("openat", name, err)
}

// StatxMask is what Lstat asks the kernel for.
const StatxMask = unix.STATX_BASIC_STATS | unix.STATX_BTIME | unix.STATX_MNT_ID

var mountIDMissing atomic.Bool

// DisableMountID makes Lstat report no mount IDs from now on, as on a
// kernel before 5.8 (tests and simulated probes use it).
func DisableMountID() { mountIDMissing.Store(true) }

// Stat is what layerseal needs of one inode.
type Stat struct {
	Dev      uint64 // st_dev
	Ino      uint64
	Mode     uint32 // st_mode: type and permission bits
	Nlink    uint32
	UID, GID uint32
	Rdev     uint64
	Size     uint64
	MtimeNS  int64
	CtimeNS  int64
	Blocks   uint64 // st_blocks: 512-byte units allocated
	// MtimeOutOfRange: the mtime lies outside what MtimeNS can hold
	// (int64 nanoseconds since the epoch: 1677 to 2262); MtimeNS is then
	// not the file's mtime.
	MtimeOutOfRange bool
	MountID         uint64 // valid only when HasMountID
	HasMountID      bool
	Attributes      uint64 // STATX_ATTR_* (immutable, append-only, mount root)
}

var statxMissing atomic.Bool

// Lstat is statx(dirfd, name, AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT) asking
// for the basic stats and the mount ID. An empty name stats dirfd itself
// (AT_EMPTY_PATH). On a kernel without statx (ENOSYS, before 4.11) it is
// fstatat with the same flags, and reports no mount ID.
func Lstat(dirfd int, name string) (Stat, error) {
	flags := unix.AT_SYMLINK_NOFOLLOW | unix.AT_NO_AUTOMOUNT
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if statxMissing.Load() {
		return lstatOld(dirfd, name, flags)
	}
	var sx unix.Statx_t
	err := ignoringEINTR(func() error { return unix.Statx(dirfd, name, flags|unix.AT_STATX_SYNC_AS_STAT, StatxMask, &sx) })
	if errors.Is(err, unix.ENOSYS) {
		statxMissing.Store(true)
		return lstatOld(dirfd, name, flags)
	}
	if err != nil {
		return Stat{}, pathErr("statx", name, err)
	}
	st := Stat{
		Dev:             unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:             sx.Ino,
		Mode:            uint32(sx.Mode),
		Nlink:           sx.Nlink,
		UID:             sx.Uid,
		GID:             sx.Gid,
		Rdev:            unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:            sx.Size,
		MtimeNS:         sx.Mtime.Sec*1e9 + int64(sx.Mtime.Nsec),
		MtimeOutOfRange: !nanosFit(sx.Mtime.Sec, int64(sx.Mtime.Nsec)),
		CtimeNS:         sx.Ctime.Sec*1e9 + int64(sx.Ctime.Nsec),
		Blocks:          sx.Blocks,
		Attributes:      sx.Attributes & sx.Attributes_mask,
	}
	if sx.Mask&unix.STATX_MNT_ID != 0 && !mountIDMissing.Load() {
		st.MountID, st.HasMountID = sx.Mnt_id, true
	}
	return st, nil
}

// lstatOld is Lstat's fallback through fstatat, which has no mount ID and
// no file attributes.
func lstatOld(dirfd int, name string, flags int) (Stat, error) {
	var s unix.Stat_t
	err := ignoringEINTR(func() error { return unix.Fstatat(dirfd, name, &s, flags) })
	if err != nil {
		return Stat{}, pathErr("fstatat", name, err)
	}
	return Stat{
		Dev:             s.Dev,
		Ino:             s.Ino,
		Mode:            s.Mode,
		Nlink:           uint32(s.Nlink),
		UID:             s.Uid,
		GID:             s.Gid,
		Rdev:            s.Rdev,
		Size:            uint64(s.Size),
		MtimeNS:         s.Mtim.Nano(),
		CtimeNS:         s.Ctim.Nano(),
		Blocks:          uint64(s.Blocks),
		MtimeOutOfRange: !nanosFit(s.Mtim.Sec, s.Mtim.Nsec),
	}, nil
}

// nanosFit reports whether sec seconds and nsec nanoseconds since the
// epoch are a time int64 nanoseconds can hold.
func nanosFit(sec, nsec int64) bool {
	const g = 1_000_000_000
	const maxSec, maxNsec = math.MaxInt64 / g, math.MaxInt64 % g
	const minSec, minNsec = math.MinInt64 / g, math.MinInt64 % g // minNsec < 0
	switch {
	case sec > maxSec || sec == maxSec && nsec > maxNsec:
		return false
	case sec < minSec-1 || sec == minSec-1 && nsec < g+minNsec:
		return false
	}
	return true
}

// procFD names fd in /proc/self/fd, the way to reach an O_PATH descriptor
// (a symlink, a FIFO) with path-based calls without resolving its name.
func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// Listxattr lists the extended attribute names of the file open at fd,
// which may be an O_PATH descriptor of any file type, symlinks included.
func Listxattr(fd int) ([]string, error) {
	path := procFD(fd)
	buf := make([]byte, 256)
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Listxattr(path, buf)
			return err
		})
		if errors.Is(err, unix.ERANGE) {
			size, serr := unix.Listxattr(path, nil)
			if serr != nil {
				return nil, pathErr("listxattr", path, serr)
			}
			buf = make([]byte, size+64)
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, pathErr("listxattr", path, err)
		}
		var names []string
		for start := 0; start < n; {
			end := start
			for end < n && buf[end] != 0 {
				end++
			}
			if end > start {
				names = append(names, string(buf[start:end]))
			}
			start = end + 1
		}
		return names, nil
	}
}

// Getxattr reads one extended attribute of the file open at fd (any
// descriptor, O_PATH included). A missing attribute is unix.ENODATA.
func Getxattr(fd int, name string) ([]byte, error) {
	path := procFD(fd)
	buf := make([]byte, 256)
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Getxattr(path, name, buf)
			return err
		})
		if errors.Is(err, unix.ERANGE) {
			size, serr := unix.Getxattr(path, name, nil)
			if serr != nil {
				return nil, pathErr("getxattr "+strconv.Quote(name), path, serr)
			}
			buf = make([]byte, size+64)
			continue
		}
		if err != nil {
			return nil, pathErr("getxattr "+strconv.Quote(name), path, err)
		}
		return buf[:n:n], nil
	}
}

// Readlinkat reads the target of the symlink name in dirfd (an empty name
// reads the O_PATH symlink descriptor dirfd itself).
func Readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Readlinkat(dirfd, name, buf)
			return err
		})
		if err != nil {
			return "", pathErr("readlinkat", name, err)
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) > unix.PathMax*16 {
			return "", pathErr("readlinkat", name, fmt.Errorf("target longer than %d bytes", len(buf)))
		}
		buf = make([]byte, len(buf)*4)
	}
}
