// Command nostatx runs a command under a seccomp filter that makes statx
// fail with ENOSYS, as it does on kernels before 4.11, so the fallbacks
// for kernels without statx mount IDs run for real:
//
//	nostatx COMMAND [ARG...]
//
// The filter is inherited by every process the command starts. Only statx
// is refused; every other system call is allowed. kernel-tests/guest.sh
// runs the privileged suites and the probe under it.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nostatx COMMAND [ARG...]")
		os.Exit(64)
	}
	path, err := exec.LookPath(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "nostatx: %v\n", err)
		os.Exit(127)
	}
	// The filter belongs to the calling thread, which must be the one that
	// calls execve: the new program keeps that thread's filter.
	runtime.LockOSThread()
	if err := denyStatx(); err != nil {
		fmt.Fprintf(os.Stderr, "nostatx: %v\n", err)
		os.Exit(1)
	}
	err = unix.Exec(path, os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "nostatx: exec %q: %v\n", path, err)
	os.Exit(126)
}

// auditArch is the AUDIT_ARCH_* value of the architectures whose system
// call numbers this filter knows.
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// filter is the seccomp program: statx (in the native ABI) returns ENOSYS,
// everything else is allowed.
func filter() ([]unix.SockFilter, error) {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("architecture %q: system call numbers unknown", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
		// Offsets in struct seccomp_data.
		offNr   = 0
		offArch = 4
	)
	return []unix.SockFilter{
		{Code: ld, K: offArch},
		{Code: jeq, K: arch, Jt: 0, Jf: 2},
		{Code: ld, K: offNr},
		{Code: jeq, K: unix.SYS_STATX, Jt: 1, Jf: 0},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}, nil
}

// denyStatx installs the filter on the calling thread. Without
// CAP_SYS_ADMIN the kernel demands no_new_privs first, which is then set.
func denyStatx() error {
	prog, err := filter()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	install := func() error {
		return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
	}
	err = install()
	if errors.Is(err, unix.EACCES) {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("prctl PR_SET_NO_NEW_PRIVS: %w", err)
		}
		err = install()
	}
	if err != nil {
		return fmt.Errorf("prctl PR_SET_SECCOMP SECCOMP_MODE_FILTER: %w", err)
	}
	return nil
}
