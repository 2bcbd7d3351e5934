package linux

import (
	"errors"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"
)

// This file holds the wrappers that change a tree: one per syscall, each
// fd-relative, none following a symlink in its last component unless the
// doc says so. An empty name addresses dirfd itself where the doc says
// AT_EMPTY_PATH is used.

// emptyPath adds AT_EMPTY_PATH to flags when name is empty.
func emptyPath(name string, flags int) int {
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	return flags
}

// Fchownat is fchownat(dirfd, name, uid, gid, AT_SYMLINK_NOFOLLOW): it
// changes the owner of name itself, a symlink included. An empty name
// changes dirfd (AT_EMPTY_PATH), which may be an O_PATH descriptor.
func Fchownat(dirfd int, name string, uid, gid uint32) error {
	flags := emptyPath(name, unix.AT_SYMLINK_NOFOLLOW)
	err := ignoringEINTR(func() error { return unix.Fchownat(dirfd, name, int(uid), int(gid), flags) })
	return pathErr(fmt.Sprintf("fchownat %d:%d", uid, gid), name, err)
}

// Fchmodat sets the permission bits of name itself with fchmodat2 and
// AT_SYMLINK_NOFOLLOW (Linux 6.6); an empty name changes dirfd
// (AT_EMPTY_PATH), which may be an O_PATH descriptor. Where fchmodat2 is
// missing it falls back, for an empty name only, to chmod through
// /proc/self/fd, which reaches exactly dirfd's inode. A symlink's mode
// cannot be changed: that is unix.EOPNOTSUPP.
func Fchmodat(dirfd int, name string, mode uint32) error {
	op := "fchmodat " + strconv.FormatUint(uint64(mode), 8)
	flags := emptyPath(name, unix.AT_SYMLINK_NOFOLLOW)
	err := ignoringEINTR(func() error { return unix.Fchmodat(dirfd, name, mode, flags) })
	if name == "" && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS)) {
		st, serr := Lstat(dirfd, "")
		if serr != nil {
			return pathErr(op, name, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return pathErr(op, name, unix.EOPNOTSUPP)
		}
		err = ignoringEINTR(func() error { return unix.Fchmodat(unix.AT_FDCWD, procFD(dirfd), mode, 0) })
	}
	return pathErr(op, name, err)
}

// UtimeOmit leaves a timestamp unchanged in Utimensat.
const UtimeOmit int64 = -1

// Utimensat sets the access and modification times of name itself
// (AT_SYMLINK_NOFOLLOW) in nanoseconds since the epoch; UtimeOmit leaves
// one unchanged. An empty name changes dirfd (AT_EMPTY_PATH), which may be
// an O_PATH descriptor.
func Utimensat(dirfd int, name string, atimeNS, mtimeNS int64) error {
	ts := []unix.Timespec{nsTimespec(atimeNS), nsTimespec(mtimeNS)}
	flags := emptyPath(name, unix.AT_SYMLINK_NOFOLLOW)
	err := ignoringEINTR(func() error { return unix.UtimesNanoAt(dirfd, name, ts, flags) })
	return pathErr("utimensat", name, err)
}

func nsTimespec(ns int64) unix.Timespec {
	if ns == UtimeOmit {
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return unix.Timespec{Sec: sec, Nsec: nsec}
}

// Setxattr sets one extended attribute of the file open at fd, which may
// be an O_PATH descriptor of any type, symlinks included (the call goes
// through /proc/self/fd, which reaches exactly fd's inode).
func Setxattr(fd int, name string, value []byte) error {
	path := procFD(fd)
	err := ignoringEINTR(func() error { return unix.Setxattr(path, name, value, 0) })
	return pathErr("setxattr "+strconv.Quote(name), path, err)
}

// Removexattr removes one extended attribute of the file open at fd (any
// descriptor, O_PATH included). A missing attribute is unix.ENODATA.
func Removexattr(fd int, name string) error {
	path := procFD(fd)
	err := ignoringEINTR(func() error { return unix.Removexattr(path, name) })
	return pathErr("removexattr "+strconv.Quote(name), path, err)
}

// Renameat2 is renameat2(olddirfd, oldname, newdirfd, newname, flags);
// with flags 0 it atomically replaces a non-directory newname.
func Renameat2(olddirfd int, oldname string, newdirfd int, newname string, flags uint) error {
	err := ignoringEINTR(func() error { return unix.Renameat2(olddirfd, oldname, newdirfd, newname, flags) })
	return pathErr(fmt.Sprintf("renameat2 %q to %q flags %#x", oldname, newname, flags), newname, err)
}

// Mknodat makes a FIFO, socket, character or block device node name in
// dirfd; mode holds the type (S_IFIFO, …) and permission bits (the umask
// applies, so set the mode afterwards).
func Mknodat(dirfd int, name string, mode uint32, dev uint64) error {
	err := ignoringEINTR(func() error { return unix.Mknodat(dirfd, name, mode, int(dev)) })
	return pathErr(fmt.Sprintf("mknodat mode %#o dev %d:%d", mode, unix.Major(dev), unix.Minor(dev)), name, err)
}

// Mkdirat makes the directory name in dirfd (the umask applies).
func Mkdirat(dirfd int, name string, mode uint32) error {
	err := ignoringEINTR(func() error { return unix.Mkdirat(dirfd, name, mode) })
	return pathErr("mkdirat", name, err)
}

// Symlinkat makes the symlink name in dirfd pointing at target.
func Symlinkat(target string, dirfd int, name string) error {
	err := ignoringEINTR(func() error { return unix.Symlinkat(target, dirfd, name) })
	return pathErr("symlinkat "+strconv.Quote(target), name, err)
}

// Linkat makes newname in newdirfd a hard link to oldname in olddirfd,
// never following a symlink oldname (flags 0).
func Linkat(olddirfd int, oldname string, newdirfd int, newname string) error {
	err := ignoringEINTR(func() error { return unix.Linkat(olddirfd, oldname, newdirfd, newname, 0) })
	return pathErr(fmt.Sprintf("linkat %q to", oldname), newname, err)
}

// Unlinkat removes name in dirfd: a directory when flags is
// unix.AT_REMOVEDIR, otherwise any other file (a symlink itself, never
// its target).
func Unlinkat(dirfd int, name string, flags int) error {
	op := "unlinkat"
	if flags&unix.AT_REMOVEDIR != 0 {
		op = "unlinkat AT_REMOVEDIR"
	}
	err := ignoringEINTR(func() error { return unix.Unlinkat(dirfd, name, flags) })
	return pathErr(op, name, err)
}

// Seek is lseek(fd, offset, whence); for SEEK_DATA and SEEK_HOLE past the
// last data the kernel answers unix.ENXIO.
func Seek(fd int, offset int64, whence int) (int64, error) {
	var off int64
	err := ignoringEINTR(func() (err error) {
		off, err = unix.Seek(fd, offset, whence)
		return err
	})
	return off, pathErr(fmt.Sprintf("lseek %d whence %d", offset, whence), procFD(fd), err)
}

// Fadvise is posix_fadvise(fd, offset, length, advice): with
// unix.FADV_WILLNEED it starts reading the range into the page cache and
// returns without waiting for it.
func Fadvise(fd int, offset, length int64, advice int) error {
	err := ignoringEINTR(func() error { return unix.Fadvise(fd, offset, length, advice) })
	return pathErr(fmt.Sprintf("fadvise %d at %d+%d", advice, offset, length), procFD(fd), err)
}

// Pread reads up to len(buf) bytes at offset; it returns 0, nil at the end.
func Pread(fd int, buf []byte, offset int64) (int, error) {
	var n int
	err := ignoringEINTR(func() (err error) {
		n, err = unix.Pread(fd, buf, offset)
		return err
	})
	return n, pathErr(fmt.Sprintf("pread at %d", offset), procFD(fd), err)
}

// PwriteAll writes all of buf at offset.
func PwriteAll(fd int, buf []byte, offset int64) error {
	for len(buf) > 0 {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Pwrite(fd, buf, offset)
			return err
		})
		if err != nil {
			return pathErr(fmt.Sprintf("pwrite at %d", offset), procFD(fd), err)
		}
		if n == 0 {
			return pathErr(fmt.Sprintf("pwrite at %d", offset), procFD(fd), unix.EIO)
		}
		buf, offset = buf[n:], offset+int64(n)
	}
	return nil
}

// Ftruncate sets the size of the file open for writing at fd.
func Ftruncate(fd int, size int64) error {
	err := ignoringEINTR(func() error { return unix.Ftruncate(fd, size) })
	return pathErr(fmt.Sprintf("ftruncate %d", size), procFD(fd), err)
}

// Syncfs flushes the whole filesystem holding fd to stable storage.
func Syncfs(fd int) error {
	err := ignoringEINTR(func() error { return unix.Syncfs(fd) })
	return pathErr("syncfs", procFD(fd), err)
}

// ReadDirNames lists the names in the directory open at fd (opened for
// reading, not O_PATH), without "." and "..", in the order the kernel
// returns them. The directory offset is left at the end.
func ReadDirNames(fd int) ([]string, error) {
	var names []string
	buf := make([]byte, 32<<10)
	for {
		var n int
		err := ignoringEINTR(func() (err error) {
			n, err = unix.Getdents(fd, buf)
			return err
		})
		if err != nil {
			return nil, pathErr("getdents64", procFD(fd), err)
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// LinkFD gives the file open at fd a name: linkat through /proc/self/fd
// with AT_SYMLINK_FOLLOW, the way to link an O_TMPFILE file without
// CAP_DAC_READ_SEARCH. newname in newdirfd must not exist.
func LinkFD(fd int, newdirfd int, newname string) error {
	err := ignoringEINTR(func() error {
		return unix.Linkat(unix.AT_FDCWD, procFD(fd), newdirfd, newname, unix.AT_SYMLINK_FOLLOW)
	})
	return pathErr("linkat "+procFD(fd)+" to", newname, err)
}

// Flock applies or removes an advisory lock (unix.LOCK_EX, LOCK_SH, LOCK_UN,
// with LOCK_NB not to wait) on the open file fd. The lock belongs to the
// open file description: it ends when every descriptor of it is closed,
// so a process that dies frees it.
func Flock(fd int, how int) error {
	err := ignoringEINTR(func() error { return unix.Flock(fd, how) })
	return pathErr("flock", procFD(fd), err)
}
