package linux

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLandlock: the kernel states its ABI or says it has no Landlock; where
// it has scopes, a ruleset that handles only them is made, and one that
// handles nothing is refused (ENOMSG), so the attributes reach the kernel.
func TestLandlock(t *testing.T) {
	abi, err := LandlockABI()
	if err != nil {
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
			t.Fatalf("LandlockABI: %v", err)
		}
		t.Logf("no Landlock here: %v", err)
		return
	}
	if abi < 1 {
		t.Fatalf("Landlock ABI %d", abi)
	}
	if _, err := LandlockCreateRuleset(&unix.LandlockRulesetAttr{}, 0); !errors.Is(err, unix.ENOMSG) {
		t.Errorf("ruleset handling nothing: %v, want ENOMSG", err)
	}
	if abi < 6 {
		t.Logf("Landlock ABI %d: no scopes", abi)
		return
	}
	fd, err := LandlockCreateRuleset(&unix.LandlockRulesetAttr{Scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL}, 0)
	if err != nil {
		t.Fatal(err)
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	unix.Close(fd)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("ruleset descriptor flags %#x, %v: want close-on-exec", flags, err)
	}
}
