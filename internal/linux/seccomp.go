package linux

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SeccompSetModeFilter installs prog as a seccomp filter of the calling
// thread (seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)); threads and programs
// it starts afterwards inherit it. The kernel demands no_new_privs or
// CAP_SYS_ADMIN first (EACCES otherwise).
func SeccompSetModeFilter(prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > 0xffff {
		return fmt.Errorf("seccomp SECCOMP_SET_MODE_FILTER: program of %d instructions: %w", len(prog), unix.EINVAL)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	err := ignoringEINTR(func() error {
		_, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
		if e != 0 {
			return e
		}
		return nil
	})
	runtime.KeepAlive(prog)
	if err != nil {
		return fmt.Errorf("seccomp SECCOMP_SET_MODE_FILTER: %w", err)
	}
	return nil
}

// SeccompActionAvailable asks the kernel whether a filter may return action
// (seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &action)). A kernel without
// seccomp filters answers ENOSYS or EINVAL, an unknown action EOPNOTSUPP.
func SeccompActionAvailable(action uint32) error {
	err := ignoringEINTR(func() error {
		_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seccomp SECCOMP_GET_ACTION_AVAIL %#x: %w", action, err)
	}
	return nil
}

// SeccompFilterActions are the filter return actions layerseal's default
// system call filter uses.
var SeccompFilterActions = []uint32{unix.SECCOMP_RET_ALLOW, unix.SECCOMP_RET_ERRNO, unix.SECCOMP_RET_KILL_PROCESS}

// SeccompFiltersAvailable tries whether the kernel takes seccomp filters
// that return every one of SeccompFilterActions (Linux 4.14).
func SeccompFiltersAvailable() error {
	for _, a := range SeccompFilterActions {
		if err := SeccompActionAvailable(a); err != nil {
			return err
		}
	}
	return nil
}
