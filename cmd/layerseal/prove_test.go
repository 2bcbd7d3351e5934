package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// TestProveVerify: a run writes its statement's signed head; prove makes
// an inclusion bundle of a changed path and an absence bundle of an
// unchanged one; verify says what each shows (exit 0), refuses them under
// another key or tampered (exit 1), and exits 2 when the statement is
// incomplete in a way that covers the path.
func TestProveVerify(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n", "src/main.go": "package main\n"})
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo more >> src/main.go; echo n > notes"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	// On a kernel without statx mount IDs (or without a cgroup v2
	// hierarchy) every statement is incomplete as a whole: every proof
	// then holds only with exit 2.
	want := wantVerifyExit(t)
	e.cliCheck(want, "verify", "--key", e.pub, filepath.Join(out, "statement.head.json"))
	changed, same := filepath.Join(e.dir, "changed.json"), filepath.Join(e.dir, "same.json")
	e.cliCheck(0, "prove", out, "src/main.go", "--out", changed)
	e.cliCheck(0, "prove", out, "./README", "--out", same)
	if got := e.cliCheck(want, "verify", "--key", e.pub, changed); !strings.Contains(got, "src/main.go changed (modified)") {
		t.Errorf("verify of an inclusion bundle: %s", got)
	}
	if got := e.cliCheck(want, "verify", "--key", e.pub, same); !strings.Contains(got, "README is not in the observed change set") {
		t.Errorf("verify of an absence bundle: %s", got)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(e.cliCheck(want, "verify", "--key", e.pub, "--json", same)), &m); err != nil {
		t.Fatal(err)
	}
	if m["holds"] != (want == exitOK) || m["kind"] != "absence" || m["path"] != "README" {
		t.Errorf("verify --json: %v", m)
	}
	// Several paths need a directory; one bundle per path in it.
	e.cliCheck(exitUsage, "prove", out, "a", "b")
	dir := filepath.Join(e.dir, "proofs")
	e.cliCheck(0, "prove", out, "notes", "src", "--out", dir)
	for _, n := range []string{"1.json", "2.json"} {
		e.cliCheck(want, "verify", "--key", e.pub, filepath.Join(dir, n))
	}
	e.cliCheck(exitUsage, "prove", out, "../etc/passwd")
	// Another key, a tampered bundle, a case variant: exit 1.
	other := filepath.Join(e.dir, "other.key")
	e.cliCheck(0, "keygen", "--out", other)
	e.cliCheck(1, "verify", "--key", other+".pub", changed)
	b, _ := os.ReadFile(changed)
	for i, bad := range []string{
		strings.Replace(string(b), `"path":"src/main.go"`, `"path":"src/main.h"`, 1),
		strings.Replace(string(b), `"kind":`, `"Kind":`, 1),
	} {
		f := filepath.Join(e.dir, "bad.json")
		os.WriteFile(f, []byte(bad), 0o644)
		if code, _, stderr := e.cli("verify", "--key", e.pub, f); code != 1 || strings.Contains(stderr, "attest.") {
			t.Errorf("tampered bundle %d: exit %d, %s", i, code, stderr)
		}
	}
	// An agent leaving a process behind makes the statement incomplete
	// as a whole: a bundle then holds only with exit 2.
	out2 := filepath.Join(e.dir, "run2")
	if code, log := e.run(out2, "(sleep 30 &); echo x > y"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	p2 := filepath.Join(e.dir, "p2.json")
	e.cliCheck(0, "prove", out2, "README", "--out", p2)
	code, stdout, stderr := e.cli("verify", "--key", e.pub, p2)
	if code != exitIncomplete || !strings.Contains(stdout, "incomplete: agent-outlived") || !strings.Contains(stderr, "does not show that it is untouched") {
		t.Errorf("absence in an incomplete statement: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestProveSubtreeExport: prove --subtree shows what changed under a path
// or that nothing did; verify --session refuses another session's bundle;
// export writes one file that verify checks whole (exit 0, or 2 with the
// run's incompleteness), and refuses tampered or under another session.
func TestProveSubtreeExport(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README": "hi\n", "src/main.go": "package main\n", "src/lib/x.go": "x\n", "deploy/prod.yaml": "p\n"})
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo more >> src/main.go; sleep 1.3; echo y > src/lib/y.go; echo n > notes", "--checkpoint-every", "1s"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	want := wantVerifyExit(t)
	var head map[string]any
	if err := json.Unmarshal([]byte(e.cliCheck(want, "verify", "--key", e.pub, "--json", filepath.Join(out, "statement.head.json"))), &head); err != nil {
		t.Fatal(err)
	}
	session := head["session_id"].(string)
	sub, none := filepath.Join(e.dir, "src.json"), filepath.Join(e.dir, "deploy.json")
	e.cliCheck(0, "prove", "--subtree", out, "src", "--out", sub)
	e.cliCheck(0, "prove", "--subtree", out, "deploy/", "--out", none)
	got := e.cliCheck(want, "verify", "--key", e.pub, "--session", session, sub)
	for _, s := range []string{"change(s) at or under src, and no other", "M  src/main.go", "A  src/lib/y.go"} {
		if !strings.Contains(got, s) {
			t.Errorf("verify of a subtree bundle lacks %q:\n%s", s, got)
		}
	}
	if strings.Contains(got, "notes") || strings.Contains(got, "README") {
		t.Errorf("verify of a subtree bundle names a path outside it:\n%s", got)
	}
	if got := e.cliCheck(want, "verify", "--key", e.pub, none); !strings.Contains(got, "nothing at or under deploy is in the observed change set") {
		t.Errorf("verify of an empty subtree: %s", got)
	}
	other := "00112233445566778899aabbccddeeff"
	if code, _, stderr := e.cli("verify", "--key", e.pub, "--session", other, sub); code != 1 || !strings.Contains(stderr, "not of session") {
		t.Errorf("verify --session of another session: exit %d, %s", code, stderr)
	}

	ev := filepath.Join(e.dir, "evidence.json")
	e.cliCheck(exitUsage, "export", out)
	e.cliCheck(0, "export", out, "--out", ev, "--prove", "src/main.go", "--prove", "deploy/prod.yaml")
	got = e.cliCheck(want, "verify", "--key", e.pub, "--session", session, ev)
	for _, s := range []string{"verified: export of session " + session, "checkpoint(s) with their heads", "proof 1: src/main.go: changed (modified)", "proof 2: deploy/prod.yaml: not changed"} {
		if !strings.Contains(got, s) {
			t.Errorf("verify of an export lacks %q:\n%s", s, got)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(e.cliCheck(want, "verify", "--key", e.pub, "--json", ev)), &m); err != nil {
		t.Fatal(err)
	}
	if m["export"] != true || m["session_id"] != session || len(m["proofs"].([]any)) != 2 {
		t.Errorf("verify --json of an export: %v", m)
	}
	if code, _, stderr := e.cli("verify", "--key", e.pub, "--session", other, ev); code != 1 || !strings.Contains(stderr, "not of session") {
		t.Errorf("export verified as another session's: exit %d, %s", code, stderr)
	}
	b, _ := os.ReadFile(ev)
	for i, bad := range []string{
		strings.Replace(string(b), `"launch":"`, `"launch":"A`, 1),
		strings.Replace(string(b), `"proofs":[`, `"proofs":[],"proofs":[`, 1),
		strings.Replace(string(b), `"checkpoints":[{`, `"checkpoints":[{"x":1,`, 1),
	} {
		f := filepath.Join(e.dir, "bad.json")
		os.WriteFile(f, []byte(bad), 0o644)
		if code, _, stderr := e.cli("verify", "--key", e.pub, f); code != 1 || strings.Contains(stderr, "attest.") {
			t.Errorf("tampered export %d: exit %d, %s", i, code, stderr)
		}
	}
}
