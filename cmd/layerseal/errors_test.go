package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/go-json-experiment/json"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// assertUntouched fails unless the workspace still holds exactly baseTree
// and no session state was left behind.
func (e *env) assertUntouched(before map[string]bool) {
	e.t.Helper()
	ents, _ := os.ReadDir(e.ws)
	got := map[string]bool{}
	for _, d := range ents {
		got[d.Name()] = true
	}
	for n := range before {
		if !got[n] {
			e.t.Errorf("workspace lost %q", n)
		}
	}
	for n := range got {
		if !before[n] {
			e.t.Errorf("workspace gained %q", n)
		}
	}
	if s, _ := os.ReadDir(filepath.Join(e.state, "sessions")); len(s) != 0 {
		e.t.Errorf("state dir keeps %d session(s) of a run that never started", len(s))
	}
}

func TestRunExitCodes(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"f": "x"})
	for _, c := range []struct {
		name   string
		script string
		want   int
	}{
		{"status", "echo hi > f; exit 3", 3}, // staged, not applied
		{"signal", "kill -TERM $$", 128 + int(syscall.SIGTERM)},
		{"ok", "true", 0},
	} {
		out := filepath.Join(e.dir, c.name)
		if code, log := e.run(out, c.script); code != c.want {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, code, c.want, log)
		}
		if _, err := os.Stat(filepath.Join(out, "statement.json")); err != nil {
			t.Errorf("%s: no statement: %v", c.name, err)
		}
	}
	code, _, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "nf"), "--state-dir", e.state, "--", "no-such-command-xyz")
	if code != exitNotFound || !strings.Contains(stderr, "no-such-command-xyz") {
		t.Errorf("missing command: exit %d, want %d: %s", code, exitNotFound, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "f")); string(b) != "x" {
		t.Errorf("workspace f = %q after the runs, want the failed run's change staged, not applied", b)
	}
}

// TestRunBadInput checks that each bad input gets exit 125 (64 for usage),
// a one-line error naming the problem, and no change anywhere.
func TestRunBadInput(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"keep": "k"})
	before := map[string]bool{"keep": true}
	file := filepath.Join(e.dir, "a-file")
	os.WriteFile(file, []byte("x"), 0o644)
	openKey := filepath.Join(e.dir, "open.key")
	b, _ := os.ReadFile(e.key)
	os.WriteFile(openKey, b, 0o644)
	ramfs := filepath.Join(e.dir, "ramfs")
	os.Mkdir(ramfs, 0o755)
	if err := unix.Mount("ramfs", ramfs, "ramfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(ramfs, unix.MNT_DETACH) })
	out := func(n string) string { return filepath.Join(e.dir, "out-"+n) }
	if err := os.MkdirAll(e.state, 0o700); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"workspace missing", []string{"--workspace", filepath.Join(e.dir, "nope"), "--key", e.key}, exitSetup, "workspace"},
		{"workspace a file", []string{"--workspace", file, "--key", e.key}, exitSetup, "not a directory"},
		{"key missing", []string{"--workspace", e.ws, "--key", filepath.Join(e.dir, "no.key")}, exitSetup, "no.key\": file does not exist (make a key pair with `layerseal keygen"},
		{"key world-readable", []string{"--workspace", e.ws, "--key", openKey}, exitSetup, "open.key"},
		{"key not a key", []string{"--workspace", e.ws, "--key", file}, exitSetup, "a-file"},
		{"out not writable", []string{"--workspace", e.ws, "--key", e.key, "--out", filepath.Join(file, "out")}, exitSetup, "output dir"},
		{"out inside workspace", []string{"--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.ws, "out")}, exitSetup, "inside the workspace"},
		{"state dir cannot hold upper", []string{"--workspace", e.ws, "--key", e.key, "--state-dir", ramfs}, exitSetup, "cannot hold an overlay upper layer"},
		{"rw missing", []string{"--workspace", e.ws, "--key", e.key, "--rw", filepath.Join(e.dir, "nope")}, exitSetup, "does not exist"},
		{"rw workspace", []string{"--workspace", e.ws, "--key", e.key, "--rw", e.ws}, exitSetup, "is the workspace"},
		{"rw holds workspace", []string{"--workspace", e.ws, "--key", e.key, "--rw", e.dir}, exitSetup, "holds the workspace"},
		{"rw state dir", []string{"--workspace", e.ws, "--key", e.key, "--rw", e.state}, exitSetup, "layerseal's state dir"},
		{"rw key", []string{"--workspace", e.ws, "--key", e.key, "--rw", e.key}, exitSetup, "layerseal's key"},
		{"rw proc", []string{"--workspace", e.ws, "--key", e.key, "--rw", "/proc/sys"}, exitSetup, "/proc"},
		{"no command", []string{"--workspace", e.ws, "--key", e.key}, exitUsage, "no agent command"},
		{"bad digest cap", []string{"--workspace", e.ws, "--key", e.key, "--digest-cap", "lots"}, exitUsage, "--digest-cap"},
		{"unknown flag", []string{"--workspace", e.ws, "--key", e.key, "--frobnicate"}, exitUsage, "frobnicate"},
		{"options after the command", []string{"--state-dir", e.state, "--", "/bin/sh", "-c", "true", "--workspace", e.ws, "--key", e.key, "--out", out("late")},
			exitUsage, "--workspace, --key, --out came after the agent's command"},
	}
	for i, c := range cases {
		args := append([]string{"run"}, c.args...)
		if !contains(c.args, "--out") {
			args = append(args, "--out", out(string(rune('a'+i))))
		}
		if !contains(c.args, "--state-dir") {
			args = append(args, "--state-dir", e.state)
		}
		if c.name != "no command" && c.name != "unknown flag" && c.name != "options after the command" {
			args = append(args, "--", "/bin/sh", "-c", "echo changed > keep")
		}
		code, _, stderr := e.cli(args...)
		// One line naming the problem, then (run's last line) whose exit
		// status it is.
		if code != c.code || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 1 ||
			!strings.Contains(stderr, fmt.Sprintf("\nlayerseal: exit status %d is layerseal's own: ", c.code)) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and a line naming %q", c.name, code, stderr, c.code, c.want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "keep")); string(b) != "k" {
		t.Errorf("workspace file changed to %q", b)
	}
	e.assertUntouched(before)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestRunNotRoot runs layerseal as an unprivileged user.
// TestRunNotRoot: every command that needs root says so to another user,
// instead of an answer that misleads.
func TestRunNotRoot(t *testing.T) {
	e := newEnv(t)
	bin := filepath.Join(e.dir, "layerseal")
	self, _ := os.ReadFile(os.Args[0])
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	privtest.Searchable(t, e.dir)
	out := filepath.Join(e.dir, "o")
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--", "true"}, exitSetup},
		{[]string{"sessions"}, exitFailed},
		{[]string{"diff", out}, exitFailed},
		{[]string{"apply", out}, exitFailed},
		{[]string{"discard", out}, exitFailed},
		{[]string{"checkpoint", out}, exitFailed},
		{[]string{"recover", "--key", e.key, out}, exitFailed},
	} {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = append(os.Environ(), cliEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stderr bytes.Buffer
		cmd.Stderr, cmd.Stdout = &stderr, &stderr
		err := cmd.Run()
		ee, ok := err.(*exec.ExitError)
		want := "layerseal " + c.args[0] + " needs root"
		if !ok || ee.ExitCode() != c.code || !strings.Contains(stderr.String(), want) {
			t.Errorf("%s as uid 65534: %v, output %q; want exit %d with %q", c.args[0], err, stderr.String(), c.code, want)
		}
	}
}

// TestRunIncomplete: a workspace holding a bind mount, and a kernel without
// statx mount IDs (simulated), give verified but incomplete statements.
func TestRunIncomplete(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"mnt/": "", "f": "x"})
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "inside"), []byte("i"), 0o644)
	if err := unix.Mount(src, filepath.Join(e.ws, "mnt"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "bind")
	code, log := e.run(out, "echo y > f")
	unix.Unmount(filepath.Join(e.ws, "mnt"), unix.MNT_DETACH)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	e.wantIncomplete(out, "submount", "mnt")

	out = filepath.Join(e.dir, "nostatx")
	code, stdout, stderr := e.cliEnv([]string{"LAYERSEAL_SIMULATE=no-statx-mnt-id"},
		"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--", "/bin/sh", "-c", "echo z > f")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	e.wantIncomplete(out, "no-mount-id", "")
	if b, _ := os.ReadFile(filepath.Join(e.ws, "f")); string(b) != "z\n" {
		t.Errorf("f = %q after apply", b)
	}
}

// wantIncomplete checks that the run in out made a verified statement
// that is incomplete with code at path and, besides, only the reasons
// every statement on this kernel carries (wantReasons).
func (e *env) wantIncomplete(out, code, path string) {
	e.t.Helper()
	st := filepath.Join(out, "statement.json")
	c, stdout, stderr := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), st)
	if c != exitIncomplete || !strings.Contains(stdout, code) {
		e.t.Errorf("verify: exit %d, want %d naming %s\n%s%s", c, exitIncomplete, code, stdout, stderr)
	}
	s := e.show(st)
	if slices.Contains(wantReasons(e.t), attest.Code(code)) && path == "" {
		checkReasons(e.t, s) // the kernel's own reason is the one wanted
	} else {
		checkReasons(e.t, s, code+" "+path)
	}
}

// TestVerifyRejects tampers with run artifacts: every case must exit 1
// and say which check failed.
func TestVerifyRejects(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"f": "x"})
	run1, run2 := filepath.Join(e.dir, "run1"), filepath.Join(e.dir, "run2")
	for _, o := range []string{run1, run2} {
		if code, log := e.run(o, "echo more >> f"); code != 0 {
			t.Fatalf("run: exit %d\n%s", code, log)
		}
	}
	st1, _ := os.ReadFile(filepath.Join(run1, "statement.json"))
	launch1 := filepath.Join(run1, "launch.json")
	otherKey := filepath.Join(e.dir, "other.key")
	e.cli("keygen", "--out", otherKey)

	// A statement whose payload says something else, signature unchanged.
	var envl map[string]any
	if err := json.Unmarshal(st1, &envl); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(envl["payload"].(string))
	// Flip the complete member, whichever way this kernel's statement has it.
	tampered := bytes.Replace(payload, []byte(`"complete":true`), []byte(`"complete":false`), 1)
	if bytes.Equal(tampered, payload) {
		tampered = bytes.Replace(payload, []byte(`"complete":false`), []byte(`"complete":true`), 1)
	}
	if bytes.Equal(tampered, payload) {
		t.Fatal("payload has no complete member to tamper with")
	}
	envl["payload"] = base64.StdEncoding.EncodeToString(tampered)
	tamperedEnv, _ := json.Marshal(envl)

	write := func(name string, b []byte) string {
		p := filepath.Join(e.dir, name)
		os.WriteFile(p, b, 0o644)
		return p
	}
	// The same statement with one bit of its signature flipped.
	sigText := envl["signatures"].([]any)[0].(map[string]any)["sig"].(string)
	sig, _ := base64.StdEncoding.DecodeString(sigText)
	sig[0] ^= 1
	badSig := bytes.Replace(st1, []byte(sigText), []byte(base64.StdEncoding.EncodeToString(sig)), 1)

	cases := []struct {
		name string
		args []string
		want string // what the message must say of the check that failed
	}{
		{"tampered payload", []string{"--key", e.pub, write("tampered.json", append(tamperedEnv, '\n'))}, ""}, // either, as the map re-encodes
		{"corrupted signature", []string{"--key", e.pub, write("badsig.json", badSig)}, "altered or corrupted"},
		{"truncated", []string{"--key", e.pub, write("trunc.json", st1[:len(st1)/2])}, "malformed"},
		{"trailing data", []string{"--key", e.pub, write("trail.json", append(append([]byte{}, st1...), "{}"...))}, "malformed"},
		{"other key", []string{"--key", otherKey + ".pub", filepath.Join(run1, "statement.json")}, "not with the given key"},
		{"other run's launch", []string{"--key", e.pub, "--launch", filepath.Join(run2, "launch.json"), filepath.Join(run1, "statement.json")}, "not bound to the launch record"},
		{"other key's launch", []string{"--key", otherKey + ".pub", launch1}, "not with the given key"},
		{"empty", []string{"--key", e.pub, write("empty.json", nil)}, "malformed"},
	}
	for _, c := range cases {
		code, stdout, stderr := e.cli(append([]string{"verify"}, c.args...)...)
		if code != exitFailed || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, want %d saying %q\n%s%s", c.name, code, exitFailed, c.want, stdout, stderr)
		}
	}
	// A launch record verifies on its own, and shows.
	if code, stdout, stderr := e.cli("verify", "--key", e.pub, launch1); code != 0 || !strings.Contains(stdout, "launch record of session") {
		t.Errorf("verify of a launch record: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := e.cli("show", launch1); code != 0 || !strings.Contains(stdout, "workspace: "+e.ws) {
		t.Errorf("show of a launch record: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := e.cli("verify", "--key", e.key, launch1); code != exitUsage || !strings.Contains(stderr, "private key") {
		t.Errorf("verify with the private key: exit %d\n%s", code, stderr)
	}
	// Each usage mistake is named, not only the usage line printed.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{filepath.Join(run1, "statement.json")}, "verify needs --key KEY.pub"},
		{[]string{"--key", e.pub}, "verify needs what to verify"},
		{[]string{"--key", e.pub, run1, run2}, "verify takes one artifact, not 2"},
		{[]string{"--key", filepath.Join(e.dir, "none.pub"), run1}, "keygen writes the public key beside the private one"},
	} {
		if code, _, stderr := e.cli(append([]string{"verify"}, c.args...)...); code != exitUsage && code != exitFailed || !strings.Contains(stderr, c.want) {
			t.Errorf("verify %q: exit %d, want a message saying %q\n%s", c.args, code, c.want, stderr)
		}
	}
	if code, _, _ := e.cli("verify", "--key", e.pub, "--launch", launch1, filepath.Join(run1, "statement.json")); code != wantVerifyExit(t) {
		t.Errorf("the untouched statement: exit %d, want %d", code, wantVerifyExit(t))
	}
}
