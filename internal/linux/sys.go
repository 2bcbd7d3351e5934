package linux

import (
	"golang.org/x/sys/unix"
)

// Close is close(2). It is not retried on EINTR: Linux frees the
// descriptor whatever close returns, and a retry could close another
// file's.
func Close(fd int) error {
	return pathErr("close", procFD(fd), unix.Close(fd))
}

// Umask is umask(2): it sets the process's file mode creation mask and
// returns the previous one. The mask is the whole process's.
func Umask(mask int) int { return unix.Umask(mask) }

// Fstatfs is fstatfs(2) of the filesystem holding the file open at fd.
func Fstatfs(fd int) (unix.Statfs_t, error) {
	var fs unix.Statfs_t
	err := ignoringEINTR(func() error { return unix.Fstatfs(fd, &fs) })
	return fs, pathErr("fstatfs", procFD(fd), err)
}

// PeerUID is the user id of the process at the other end of the unix
// socket fd, as it was when it connected (SO_PEERCRED).
func PeerUID(fd int) (uint32, error) {
	var cred *unix.Ucred
	err := ignoringEINTR(func() (err error) {
		cred, err = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		return err
	})
	if err != nil {
		return 0, pathErr("getsockopt SO_PEERCRED", procFD(fd), err)
	}
	return cred.Uid, nil
}
