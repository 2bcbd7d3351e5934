package linux

import (
	"errors"
	"time"

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

// FileWatch is an inotify instance watching one file for IN_MODIFY: the
// kernel raises it on a cgroup's cgroup.events whenever "populated" or
// "frozen" changes, so a waiter can sleep until the state it waits for may
// have come instead of polling.
type FileWatch struct{ fd int }

// WatchModify starts watching path for modification.
func WatchModify(path string) (*FileWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, pathErr("inotify_init1", path, err)
	}
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return nil, pathErr("inotify_add_watch", path, err)
	}
	return &FileWatch{fd: fd}, nil
}

// Wait returns when the file was modified since the last Wait (or since
// WatchModify), or when timeout has passed, whichever comes first. It
// reports whether a modification was seen.
func (w *FileWatch) Wait(timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
	for {
		left := time.Until(end)
		if left < 0 {
			left = 0
		}
		fds[0].Revents = 0
		n, err := unix.Poll(fds, int((left+time.Millisecond-1)/time.Millisecond))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
		break
	}
	var buf [4096]byte
	for {
		if n, err := unix.Read(w.fd, buf[:]); n <= 0 || err != nil {
			return true
		}
	}
}

// Close ends the watch. The kernel makes it wait for an SRCU grace period
// (10-20 ms measured), so callers that need not wait close in the
// background.
func (w *FileWatch) Close() error { return Close(w.fd) }
