package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// wrapped runs layerseal with args from a shell that first runs prelude
// (the operator's script: `exec 9<...`), and returns the exit code and
// output.
func (e *env) wrapped(prelude string, args ...string) (int, string) {
	e.t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", prelude + "\nexec \"$@\"", "sh", os.Args[0]}, args...)...)
	cmd.Env = append(append(os.Environ(), cliEnv+"=1"), "WS="+e.ws, "DIR="+e.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String()
}

// launchSandbox verifies a run's launch record and returns its sandbox.
func (e *env) launchSandbox(out string) attest.Sandbox {
	e.t.Helper()
	return e.launchRecord(out).Sandbox
}

// launchRecord verifies and returns the launch record of the run in out.
func (e *env) launchRecord(out string) *attest.LaunchRecord {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "launch.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		e.t.Fatal(err)
	}
	lr, err := attest.VerifyLaunch(b, pub)
	if err != nil {
		e.t.Fatalf("launch record: %v", err)
	}
	return lr
}

// TestHostileInheritedDescriptor is attack 7: the operator's script holds
// the workspace open on descriptor 9 (no close-on-exec) when it starts
// layerseal; the agent writes through /proc/self/fd/9 straight into the
// real workspace, past the overlay. Only 0, 1 and 2 may reach the agent.
func TestHostileInheritedDescriptor(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"keep": "k"})
	out := filepath.Join(e.dir, "out")
	code, log := e.wrapped(`exec 9<"$WS" 7>"$DIR/seven"`, "run", "--workspace", e.ws, "--key", e.key, "--out", out,
		"--state-dir", e.state, "--", "/bin/sh", "-c",
		`echo pwned > /proc/self/fd/9/.env; echo seven >&7; ls /proc/self/fd/ > fds; exit 0`)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, ".env")); err == nil {
		t.Fatalf("the agent wrote %q into the real workspace through an inherited descriptor", b)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "seven")); len(b) > 0 {
		t.Errorf("the agent wrote %q through the caller's descriptor 7", b)
	}
	fds, err := os.ReadFile(filepath.Join(e.ws, "fds"))
	if err != nil {
		t.Fatalf("the agent's listing of its descriptors: %v\n%s", err, log)
	}
	// ls itself holds one descriptor open on the directory it lists.
	if got := strings.Fields(string(fds)); len(got) != 4 || got[0] != "0" || got[1] != "1" || got[2] != "2" {
		t.Errorf("the agent holds descriptors %q, want 0, 1, 2 (and ls's own)", got)
	}
	if n := e.launchSandbox(out).PreservedFDs; n != 0 {
		t.Errorf("launch record: preserved_fds %d, want 0", n)
	}
}

// TestPreserveFDs: --preserve-fds 2 passes the caller's 3 and 4 on at the
// same numbers, and nothing above them.
func TestPreserveFDs(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "out")
	code, log := e.wrapped(`exec 3>"$DIR/three" 4>"$DIR/four" 5>"$DIR/five" 9<"$WS"`, "run", "--preserve-fds", "2",
		"--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--", "/bin/sh", "-c",
		`echo to-three >&3; echo to-four >&4; echo to-five >&5; ls /proc/self/fd/ > fds; exit 0`)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	for name, want := range map[string]string{"three": "to-three\n", "four": "to-four\n", "five": ""} {
		if b, _ := os.ReadFile(filepath.Join(e.dir, name)); string(b) != want {
			t.Errorf("%s holds %q, want %q", name, b, want)
		}
	}
	fds, _ := os.ReadFile(filepath.Join(e.ws, "fds"))
	if got := strings.Fields(string(fds)); len(got) != 6 || got[3] != "3" || got[4] != "4" {
		t.Errorf("the agent holds descriptors %q, want 0 to 4 (and ls's own)", got)
	}
	if n := e.launchSandbox(out).PreservedFDs; n != 2 {
		t.Errorf("launch record: preserved_fds %d, want 2", n)
	}
	// A descriptor asked for but not open fails the launch.
	code, log = e.wrapped(`exec 3>"$DIR/three"`, "run", "--preserve-fds", "2",
		"--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "out2"), "--state-dir", e.state, "--", "true")
	if code == 0 || !strings.Contains(log, "descriptor 4 ") || !strings.Contains(log, "open them before starting layerseal") {
		t.Errorf("run with descriptor 4 closed: exit %d\n%s", code, log)
	}
}
