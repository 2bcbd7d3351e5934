package seccomp

import (
	"fmt"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Additions are the rules layerseal adds to Docker's default profile, for
// every agent whatever its capabilities: the terminal ioctls that let a
// process type into, or take over, a terminal it shares with the operator.
// ioctl's request is an unsigned int, so only its low 32 bits are compared
// (the kernel ignores the rest, and so must the filter).
var Additions = []specs.LinuxSyscall{
	refuseIoctl(unix.TIOCSTI),   // type bytes into a terminal's input
	refuseIoctl(unix.TIOCLINUX), // the Linux console's selection and input
}

func refuseIoctl(request uint64) specs.LinuxSyscall {
	eperm := uint(unix.EPERM)
	return specs.LinuxSyscall{
		Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: &eperm,
		Args: []specs.LinuxSeccompArg{{Index: 1, Value: 0xffffffff, ValueTwo: request, Op: specs.OpMaskedEqual}},
	}
}

// Profile returns the default filter's description for an agent whose
// bounding capability set is bounding (capability names such as
// "CAP_SYS_ADMIN"): Docker's default profile, whose rules depend on those
// capabilities as in Docker, followed by Additions.
func Profile(bounding []string) (*specs.LinuxSeccomp, error) {
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: bounding}}}
	p, err := moby.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("resolve the default seccomp profile: %w", err)
	}
	p.Syscalls = append(p.Syscalls, Additions...)
	return p, nil
}

// Default compiles Profile(bounding) for the native architecture.
func Default(bounding []string) (Program, error) {
	arch, err := Native()
	if err != nil {
		return nil, err
	}
	p, err := Profile(bounding)
	if err != nil {
		return nil, err
	}
	return Compile(p, arch)
}
