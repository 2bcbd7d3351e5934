package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRunLogOutput: run --log-output keeps the agent's stdout and stderr
// as 0600 files in a fresh 0700 dir, still passes them through, records
// their digests in the statement, and verify --logs checks the files
// against them: a changed file, or a symlink in its place, fails.
func TestRunLogOutput(t *testing.T) {
	e := newEnv(t)
	out, logs := filepath.Join(e.dir, "out"), filepath.Join(e.dir, "logs")
	code, stdout, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state,
		"--log-output", logs, "--", "/bin/sh", "-ec", `printf 'hello\n'; printf 'oops\n' >&2; echo x > f`)
	if code != 0 || stdout != "hello\n" || !strings.HasPrefix(stderr, "oops\n") {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if fi, err := os.Lstat(logs); err != nil || fi.Mode() != os.ModeDir|0o700 {
		t.Errorf("log dir: %v, %v; want a 0700 directory", fi.Mode(), err)
	}
	for name, want := range map[string]string{"stdout": "hello\n", "stderr": "oops\n"} {
		p := filepath.Join(logs, name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
		if fi, err := os.Lstat(p); err != nil || fi.Mode() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", name, fi.Mode(), err)
		}
	}
	st := filepath.Join(out, "statement.json")
	got := e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, "--logs", logs, st)
	for _, want := range []string{
		fmt.Sprintf("log: stdout: 6 bytes, sha256 %x\n", sha256.Sum256([]byte("hello\n"))),
		fmt.Sprintf("log: stderr: 5 bytes, sha256 %x\n", sha256.Sum256([]byte("oops\n"))),
		"logs: stdout: matches the statement\n", "logs: stderr: matches the statement\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("verify --logs: no %q in\n%s", want, got)
		}
	}

	// A changed log fails verify.
	if err := os.WriteFile(filepath.Join(logs, "stdout"), []byte("hellO\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := e.cliCheck(1, "verify", "--key", e.pub, "--logs", logs, st); !strings.Contains(got, "logs: stdout: log \"stdout\" is not the one the statement records") ||
		!strings.Contains(got, "logs: stderr: matches the statement") {
		t.Errorf("verify of a changed log:\n%s", got)
	}
	// A symlink to a good copy is not followed.
	good := filepath.Join(e.dir, "good")
	if err := os.WriteFile(good, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(logs, "stdout"))
	if err := os.Symlink(good, filepath.Join(logs, "stdout")); err != nil {
		t.Fatal(err)
	}
	e.cliCheck(1, "verify", "--key", e.pub, "--logs", logs, st)
	os.Remove(filepath.Join(logs, "stdout"))
	os.Rename(good, filepath.Join(logs, "stdout"))
	e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, "--logs", logs, st)

	// A statement without logs: --logs says so and fails.
	out2 := filepath.Join(e.dir, "out2")
	if code, msg := e.run(out2, "true"); code != 0 {
		t.Fatalf("run without logs: %d %s", code, msg)
	}
	if code, _, stderr := e.cli("verify", "--key", e.pub, "--logs", logs, filepath.Join(out2, "statement.json")); code != 1 || !strings.Contains(stderr, "the statement records no logs") {
		t.Errorf("verify --logs of a run without logs: exit %d, %s", code, stderr)
	}
}

// TestRunLogOutputRefused: a log dir that is not empty, inside the
// workspace, a symlink, or the output dir is refused before the agent
// starts, with nothing written.
func TestRunLogOutputRefused(t *testing.T) {
	e := newEnv(t)
	full := filepath.Join(e.dir, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "old"), nil, 0o644)
	empty := filepath.Join(e.dir, "empty")
	os.Mkdir(empty, 0o755)
	link := filepath.Join(e.dir, "link")
	os.Symlink(empty, link)
	out := filepath.Join(e.dir, "out")
	for dir, want := range map[string]string{
		full:                          "is not empty",
		filepath.Join(e.ws, "logs"):   "is inside the workspace",
		link:                          "is a symlink",
		out:                           "overlaps the output dir",
		filepath.Join(out, "logs"):    "overlaps the output dir",
		filepath.Join(e.state, "log"): "overlaps the state dir",
	} {
		code, msg := e.run(out, "echo x > f", "--log-output", dir)
		if code != exitSetup || !strings.Contains(msg, want) {
			t.Errorf("--log-output %s: exit %d, want %d and %q:\n%s", dir, code, exitSetup, want, msg)
		}
		if _, err := os.Stat(filepath.Join(out, "launch.json")); err == nil {
			t.Fatalf("--log-output %s: a launch record was written", dir)
		}
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("the symlink's target got %d entries", len(ents))
	}
	if _, err := os.Stat(filepath.Join(e.ws, "f")); err == nil {
		t.Error("the agent ran")
	}
}

// TestRunLogOutputFullDisk: a log dir on a full filesystem does not stop
// the agent or its change set: the output still passes through in full,
// and the statement records the log as truncated at what was written,
// which verify --logs then accepts.
func TestRunLogOutputFullDisk(t *testing.T) {
	e := newEnv(t)
	logs := filepath.Join(e.dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", logs, "tmpfs", 0, "size=16k"); err != nil {
		t.Fatalf("mount a small tmpfs for the log dir: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(logs, unix.MNT_DETACH) })
	const n = 256 << 10
	out := filepath.Join(e.dir, "out")
	code, stdout, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state,
		"--log-output", logs, "--", "/bin/sh", "-ec", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo x > f`, n))
	if code != 0 || len(stdout) != n {
		t.Fatalf("run: exit %d, %d bytes of stdout (want %d); stderr:\n%s", code, len(stdout), n, stderr)
	}
	if !strings.Contains(stderr, "log stdout is truncated after") {
		t.Errorf("no truncation notice:\n%s", stderr)
	}
	if b, err := os.ReadFile(filepath.Join(e.ws, "f")); err != nil || string(b) != "x\n" {
		t.Errorf("change set not applied: %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(logs, "stdout"))
	if err != nil || len(b) >= n || len(b) == 0 {
		t.Fatalf("log of %d bytes, %v: want some, fewer than %d", len(b), err, n)
	}
	got := e.cliCheck(wantVerifyExit(t), "verify", "--key", e.pub, "--logs", logs, filepath.Join(out, "statement.json"))
	if want := fmt.Sprintf("log: stdout: %d bytes, sha256 %x (truncated", len(b), sha256.Sum256(b)); !strings.Contains(got, want) {
		t.Errorf("verify: no %q in\n%s", want, got)
	}
}
