// Package privtest gates tests that need root (mounts, namespaces, mknod,
// trusted xattrs). They run only when LAYERSEAL_PRIVILEGED=1 is set, and then
// they insist on uid 0: a privileged test never passes by skipping once the
// caller has opted in.
package privtest

import (
	"os"
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
