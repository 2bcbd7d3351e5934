package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunStatusWhose: an agent that prints a layerseal-looking failure and
// exits 125 or 127 is told apart from layerseal failing (an output dir
// already used) or not finding the command: the last stderr line and
// --json's object say whose status it is.
func TestRunStatusWhose(t *testing.T) {
	e := newEnv(t)
	used := filepath.Join(e.dir, "used")
	os.MkdirAll(used, 0o755)
	os.WriteFile(filepath.Join(used, "statement.json"), []byte("{}"), 0o644)
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		whose string
	}{
		{"agent-125", []string{"--", "/bin/sh", "-c", `echo "layerseal: attest the change set: failed" >&2; exit 125`}, 125, "agent"},
		{"agent-127", []string{"--", "/bin/sh", "-c", `echo "layerseal: command not found" >&2; exit 127`}, 127, "agent"},
		{"agent-0", []string{"--", "/bin/true"}, 0, "agent"},
		{"not-found", []string{"--", "/no/such/agent"}, exitNotFound, "layerseal"},
		{"setup", []string{"--out-used"}, exitSetup, "layerseal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(e.dir, tc.name)
			args := []string{"run", "--json", "--workspace", e.ws, "--key", e.key, "--state-dir", e.state}
			if tc.args[0] == "--out-used" {
				args = append(args, "--out", used, "--", "/bin/true")
			} else {
				args = append(append(args, "--out", out), tc.args...)
			}
			code, stdout, stderr := e.cli(args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "layerseal: exit status ") || !strings.Contains(last, map[string]string{"agent": " is the agent's: ", "layerseal": " is layerseal's own: "}[tc.whose]) {
				t.Errorf("last stderr line %q does not say the status is %s's", last, tc.whose)
			}
			outLines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
			var r runResult
			if err := json.Unmarshal([]byte(outLines[len(outLines)-1]), &r); err != nil {
				t.Fatalf("--json: %v\n%s", err, stdout)
			}
			if r.ExitStatus != tc.code || r.Whose != tc.whose || (tc.whose == "agent") != (r.Agent != nil) {
				t.Errorf("--json: %+v", r)
			}
		})
	}
}

// TestVerifyWorkspace: verify --workspace agrees with a workspace the run
// applied to, and names each path changed after (content of the same size,
// mode, a link split, a deleted path back, an added path gone): exit 1.
func TestVerifyWorkspace(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"keep": "k\n", "gone": "g\n"})
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, `echo new > f; ln f f2; mkdir d; ln -s x s; chmod 600 keep; rm gone; setfattr -n user.a -v 1 f`); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := filepath.Join(out, "statement.json")
	// Exit 2 only for a kernel without statx mount IDs (no-mount-id).
	if code, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, st); code != 0 &&
		!(code == exitIncomplete && strings.Contains(so, "no-mount-id") && strings.Contains(so, "applied path(s) agree")) {
		t.Fatalf("verify --workspace after apply: exit %d\n%s%s", code, so, se)
	}
	os.WriteFile(filepath.Join(e.ws, "f2"), []byte("NEW\n"), 0o644) // same inode, same size
	os.Chmod(filepath.Join(e.ws, "keep"), 0o644)
	os.WriteFile(filepath.Join(e.ws, "gone"), []byte("g\n"), 0o644)
	os.Remove(filepath.Join(e.ws, "s"))
	code, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, st)
	if code != exitFailed {
		t.Fatalf("verify --workspace after changes: exit %d\n%s%s", code, so, se)
	}
	for _, p := range []string{"workspace: f: ", "workspace: f2: ", "workspace: keep: mode", "workspace: gone: present", "workspace: s: absent"} {
		if !strings.Contains(so, p) {
			t.Errorf("no %q in\n%s", p, so)
		}
	}
}
