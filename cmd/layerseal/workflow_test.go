package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// background is a `layerseal run` left running until its agent is told to
// finish (the file gate appears).
type background struct {
	cmd  *exec.Cmd
	log  *bytes.Buffer
	gate string
}

// runBackground starts a run whose agent runs script, then waits until
// the file started exists in the session's upper layer, then waits for the
// gate file (outside the workspace) before running after.
func (e *env) runBackground(out, script, after string, extra ...string) *background {
	e.t.Helper()
	gate := filepath.Join(e.dir, filepath.Base(out)+".gate")
	full := script + "\ntouch started\nwhile [ ! -e " + gate + " ]; do sleep 0.05; done\n" + after
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state}, extra...)
	args = append(args, "--", "/bin/sh", "-ec", full)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	b := &background{cmd: cmd, log: &bytes.Buffer{}, gate: gate}
	cmd.Stdout, cmd.Stderr = b.log, b.log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ups, _ := filepath.Glob(filepath.Join(e.state, "sessions", "*", "upper", "started")); len(ups) > 0 {
			return b
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the agent did not start:\n%s", b.log)
		}
	}
}

// finish opens the gate and waits for the run's end; it returns its exit
// code and output.
func (b *background) finish(t *testing.T) (int, string) {
	t.Helper()
	if err := os.WriteFile(b.gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := b.cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, b.log.String()
}

// sessionOf returns the session id in the launch record of out.
func (e *env) sessionOf(out string) string {
	e.t.Helper()
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		e.t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(out, "launch.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	l, err := attest.VerifyLaunch(env, pub)
	if err != nil {
		e.t.Fatalf("launch record of %s: %v", out, err)
	}
	return l.SessionID
}

// TestRunWorkspaceLocked: while a session runs, a second run on the same
// workspace, on a directory inside it and on one above it is refused
// naming the holder's session id, and nothing of the second agent runs;
// afterwards the workspace is free again.
func TestRunWorkspaceLocked(t *testing.T) {
	e := newEnv(t)
	e.ws = filepath.Join(e.dir, "above", "ws") // above holds no state dir or key
	write(t, e.ws, map[string]string{"sub/f": "f", "README.md": "r"})
	first := e.runBackground(filepath.Join(e.dir, "first"), "echo first > README.md", "")
	id := e.sessionOf(filepath.Join(e.dir, "first"))
	for i, ws := range []string{e.ws, filepath.Join(e.ws, "sub"), filepath.Dir(e.ws)} {
		out := filepath.Join(t.TempDir(), "second")
		code, _, stderr := e.cli("run", "--workspace", ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--", "/bin/sh", "-c", "echo second > README.md; touch sub/second")
		if code != exitSetup || !strings.Contains(stderr, "in use by another session") || !strings.Contains(stderr, id) {
			t.Errorf("run %d on %q while session %s runs: exit %d, want %d naming it:\n%s", i, ws, id, code, exitSetup, stderr)
		}
		if _, err := os.Lstat(filepath.Join(out, "launch.json")); err == nil {
			t.Errorf("the refused run %d left a launch record", i)
		}
	}
	if code, log := first.finish(t); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, log)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "README.md")); string(b) != "first\n" {
		t.Errorf("README.md after the first run: %q", b)
	}
	if code, log := e.run(filepath.Join(e.dir, "third"), "echo third > README.md"); code != 0 {
		t.Errorf("a run after the first ended: exit %d\n%s", code, log)
	}
}
