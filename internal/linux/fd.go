package linux

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloexecFrom marks every descriptor of the process numbered first or above
// close-on-exec, so that none of them crosses an exec: with close_range
// (CLOSE_RANGE_CLOEXEC, Linux 5.11) where the kernel has it, otherwise by
// listing /proc/self/fd, otherwise by trying every number below the
// descriptor limit.
func CloexecFrom(first int) error {
	err := ignoringEINTR(func() error { return unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC) })
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("close_range %d.. CLOSE_RANGE_CLOEXEC: %w", first, err)
	}
	if fds, lerr := openFDs(); lerr == nil {
		for _, fd := range fds {
			if fd >= first {
				if err := setCloexec(fd); err != nil && !errors.Is(err, unix.EBADF) {
					return err
				}
			}
		}
		return nil
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("getrlimit RLIMIT_NOFILE: %w", err)
	}
	for fd := first; uint64(fd) < lim.Cur && fd < 1<<20; fd++ {
		if err := setCloexec(fd); err != nil && !errors.Is(err, unix.EBADF) {
			return err
		}
	}
	return nil
}

// openFDs lists the open descriptors from /proc/self/fd. The list includes
// the descriptor used to read it, closed by then.
func openFDs() ([]int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds, nil
}

// setCloexec sets FD_CLOEXEC on fd.
func setCloexec(fd int) error {
	return ignoringEINTR(func() error {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			return fmt.Errorf("fcntl %d F_GETFD: %w", fd, err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return fmt.Errorf("fcntl %d F_SETFD FD_CLOEXEC: %w", fd, err)
		}
		return nil
	})
}

// DupFrom duplicates fd onto the lowest free descriptor numbered min or
// above (fcntl F_DUPFD, or F_DUPFD_CLOEXEC when cloexec is set).
func DupFrom(fd, min int, cloexec bool) (int, error) {
	cmd := unix.F_DUPFD
	if cloexec {
		cmd = unix.F_DUPFD_CLOEXEC
	}
	var nfd int
	err := ignoringEINTR(func() error {
		var err error
		nfd, err = unix.FcntlInt(uintptr(fd), cmd, min)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("fcntl %d F_DUPFD min %d: %w", fd, min, err)
	}
	return nfd, nil
}

// Dup3 is dup3(2): newfd becomes a copy of oldfd, close-on-exec only when
// cloexec is set.
func Dup3(oldfd, newfd int, cloexec bool) error {
	flags := 0
	if cloexec {
		flags = unix.O_CLOEXEC
	}
	err := ignoringEINTR(func() error { return unix.Dup3(oldfd, newfd, flags) })
	if err != nil {
		return fmt.Errorf("dup3 %d onto %d: %w", oldfd, newfd, err)
	}
	return nil
}
