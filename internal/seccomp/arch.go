package seccomp

//go:generate go run gen_syscalls.go

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Arch is an architecture the compiler knows: its audit identifier, which
// the kernel passes in seccomp_data.arch, and its system call numbers.
// Both known architectures are little-endian, which the argument offsets
// rely on.
type Arch struct {
	Name  string // GOARCH
	Audit uint32 // AUDIT_ARCH_* value of the native ABI
	// X32Bit, when not 0, marks a call through the x32 ABI, which shares
	// the native audit arch (amd64's __X32_SYSCALL_BIT).
	X32Bit   uint32
	syscalls map[string]uint32
}

var (
	// AMD64 is x86-64's native ABI.
	AMD64 = Arch{Name: "amd64", Audit: unix.AUDIT_ARCH_X86_64, X32Bit: 0x40000000, syscalls: syscallsAMD64}
	// ARM64 is AArch64's native ABI.
	ARM64 = Arch{Name: "arm64", Audit: unix.AUDIT_ARCH_AARCH64, syscalls: syscallsARM64}
)

// Native returns the architecture the binary was built for.
func Native() (Arch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return AMD64, nil
	case "arm64":
		return ARM64, nil
	}
	return Arch{}, fmt.Errorf("architecture %q: no system call table for the seccomp filter", runtime.GOARCH)
}

// Syscall returns the number of the system call called name, and whether
// the architecture has it.
func (a Arch) Syscall(name string) (uint32, bool) {
	n, ok := a.syscalls[name]
	return n, ok
}
