package main

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/privtest"
)

// The test binary, re-executed, plays two more parts.
const (
	// wrapperEnv=1: behave as the nostatx command.
	wrapperEnv = "NOSTATX_TEST_WRAPPER"
	// childEnv=install: install the filter, then check what statx and
	// linux.Lstat do; childEnv=check: only check (the filter was inherited).
	childEnv = "NOSTATX_TEST_CHILD"
)

func TestMain(m *testing.M) {
	if os.Getenv(wrapperEnv) == "1" {
		os.Unsetenv(wrapperEnv)
		main()
	}
	switch os.Getenv(childEnv) {
	case "install":
		runtime.LockOSThread()
		if err := denyStatx(); err != nil {
			os.Stderr.WriteString("install: " + err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(check())
	case "check":
		os.Exit(check())
	}
	os.Exit(m.Run())
}

// check runs under the filter: statx must fail with ENOSYS, other calls
// must work, and linux.Lstat must fall back to fstatat without a mount ID.
func check() int {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_BASIC_STATS, &sx); !errors.Is(err, unix.ENOSYS) {
		os.Stderr.WriteString("statx under the filter: want ENOSYS, got " + errString(err) + "\n")
		return 4
	}
	st, err := linux.Lstat(unix.AT_FDCWD, "/")
	if err != nil {
		os.Stderr.WriteString("linux.Lstat: " + err.Error() + "\n")
		return 5
	}
	var want unix.Stat_t
	if err := unix.Lstat("/", &want); err != nil {
		os.Stderr.WriteString("lstat: " + err.Error() + "\n")
		return 6
	}
	if st.HasMountID || st.Ino != want.Ino || st.Dev != want.Dev || st.Mode != want.Mode {
		os.Stderr.WriteString("linux.Lstat fallback disagrees with lstat or reports a mount ID\n")
		return 7
	}
	return 0
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

func TestFilterDeniesStatx(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=install")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child under the filter: %v\n%s", err, out)
	}
}

// TestWrapperFilterIsInherited runs the command as "nostatx SELF": the
// filter must hold in the program it execs.
func TestWrapperFilterIsInherited(t *testing.T) {
	cmd := exec.Command(os.Args[0], os.Args[0])
	cmd.Env = append(os.Environ(), wrapperEnv+"=1", childEnv+"=check")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nostatx %s: %v\n%s", os.Args[0], err, out)
	}
}

func TestWrapperUsage(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), wrapperEnv+"=1")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 64 {
		t.Errorf("nostatx without a command: %v, want exit 64", err)
	}
}

// TestCheckFailsWithoutFilter makes sure the checks above can fail: without
// the filter statx works and linux.Lstat reports a mount ID.
func TestCheckFailsWithoutFilter(t *testing.T) {
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", 0, unix.STATX_BASIC_STATS, &sx); err != nil {
		if privtest.Enabled() {
			t.Fatalf("statx unavailable on this kernel (%v): the full test run needs Linux 4.11 or later", err)
		}
		t.Skipf("statx unavailable on this kernel: %v", err)
	}
	if code := check(); code != 4 {
		t.Errorf("check without the filter: exit %d, want 4 (statx works)", code)
	}
}
