package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/seccomp"
)

// The launch record says which filter the agent ran under: by default the
// one Docker's profile gives for the default capabilities, with its digest;
// with --seccomp unconfined none, and the statement stays complete.
func TestRunSeccompRecorded(t *testing.T) {
	e := newEnv(t)
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		t.Fatal(err)
	}
	want, err := seccomp.Default(layerseal.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, mode string
		digest     []byte
	}{
		{"default", "default", want.SHA256()},
		{"unconfined", "unconfined", nil},
	} {
		out := filepath.Join(e.dir, "out-"+c.flag)
		code, text := e.run(out, `grep "^Seccomp:" /proc/self/status`, "--seccomp", c.flag)
		if code != 0 {
			t.Fatalf("--seccomp %s: exit %d: %s", c.flag, code, text)
		}
		b, err := os.ReadFile(filepath.Join(out, "launch.json"))
		if err != nil {
			t.Fatal(err)
		}
		l, err := attest.VerifyLaunch(b, pub)
		if err != nil {
			t.Fatal(err)
		}
		if l.Sandbox.Seccomp != c.mode || !bytes.Equal(l.Sandbox.SeccompSHA256, c.digest) || len(l.Sandbox.Missing) != 0 {
			t.Errorf("--seccomp %s: launch record sandbox %+v, want seccomp %q digest %x", c.flag, l.Sandbox, c.mode, c.digest)
		}
		// Under the filter the agent's mode is 2; unconfined it is what
		// the test itself runs under (0, or 2 under the kernel matrix's
		// statx-less wrapper).
		if c.flag == "default" && !strings.Contains(text, "Seccomp:\t2") {
			t.Errorf("--seccomp default: the agent printed %q", text)
		}
	}
}
