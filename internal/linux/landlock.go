package linux

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LandlockCreateRuleset is landlock_create_ruleset(2). With attr it
// returns the descriptor (close-on-exec) of a new ruleset; with attr nil
// and flags LANDLOCK_CREATE_RULESET_VERSION it returns the highest
// Landlock ABI version the kernel offers. A kernel built without Landlock
// answers ENOSYS, one that has it but did not enable it at boot (not in
// its LSM list) EOPNOTSUPP.
func LandlockCreateRuleset(attr *unix.LandlockRulesetAttr, flags uint32) (int, error) {
	var p, size uintptr
	if attr != nil {
		p, size = uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr)
	}
	var r uintptr
	err := ignoringEINTR(func() error {
		var e unix.Errno
		r, _, e = unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, p, size, uintptr(flags))
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("landlock_create_ruleset%s: %w", landlockCreateFlags(flags), err)
	}
	return int(r), nil
}

func landlockCreateFlags(flags uint32) string {
	switch flags {
	case 0:
		return ""
	case unix.LANDLOCK_CREATE_RULESET_VERSION:
		return " LANDLOCK_CREATE_RULESET_VERSION"
	}
	return fmt.Sprintf(" flags %#x", flags)
}

// LandlockABI asks the kernel for its Landlock ABI version (see
// LandlockCreateRuleset).
func LandlockABI() (int, error) {
	return LandlockCreateRuleset(nil, unix.LANDLOCK_CREATE_RULESET_VERSION)
}

// LandlockRestrictSelf is landlock_restrict_self(2): it confines the
// calling thread, and every program it executes and every process it
// starts afterwards, to the ruleset at fd, for good. The kernel demands
// no_new_privs or CAP_SYS_ADMIN first (EPERM otherwise).
func LandlockRestrictSelf(fd int, flags uint32) error {
	err := ignoringEINTR(func() error {
		_, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), uintptr(flags), 0)
		if e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("landlock_restrict_self flags %#x: %w", flags, err)
	}
	return nil
}
