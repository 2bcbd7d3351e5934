// Package privtest gates tests that need root (mounts, namespaces, mknod,
// trusted xattrs). They run only when LAYERSEAL_PRIVILEGED=1 is set, and then
// they insist on uid 0: a privileged test never passes by skipping once the
// caller has opted in.
package privtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Env is the environment variable that opts in to privileged tests.
const Env = "LAYERSEAL_PRIVILEGED"

// Enabled reports whether privileged tests were requested.
func Enabled() bool { return os.Getenv(Env) == "1" }

// Require skips t unless privileged tests were requested, and fails it when
// they were requested but the process is not root.
func Require(t testing.TB) {
	t.Helper()
	if !Enabled() {
		t.Skipf("privileged test: set %s=1 and run as root", Env)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but euid is %d: privileged tests must run as root", Env, os.Geteuid())
	}
}

// Searchable lets any user reach dir: it adds read and search bits for
// group and others to dir and every directory above it, and changes
// nothing else (a sticky, world-writable /tmp stays so).
func Searchable(t testing.TB, dir string) {
	t.Helper()
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o055 != 0o055 {
			if err := os.Chmod(p, fi.Mode()&(os.ModePerm|os.ModeSticky|os.ModeSetuid|os.ModeSetgid)|0o055); err != nil {
				t.Fatal(err)
			}
		}
		if p == "/" {
			return
		}
	}
}
