package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSessionsPrune: `sessions --prune` removes an applied session and
// prints it, keeps a staged one (naming --force) and a running one, and
// with --force removes the staged one and says its change set went too;
// bad durations and flags without --prune are usage errors that say what
// to give.
func TestSessionsPrune(t *testing.T) {
	e := newEnv(t)
	applied, staged := filepath.Join(e.dir, "applied"), filepath.Join(e.dir, "staged")
	if code, stderr := e.run(applied, "echo a > a.txt"); code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	if code, stderr := e.run(staged, "echo b > b.txt", "--stage"); code != 0 {
		t.Fatalf("run --stage: exit %d: %s", code, stderr)
	}
	sync := filepath.Join(e.dir, "sync")
	if err := os.Mkdir(sync, 0o777); err != nil {
		t.Fatal(err)
	}
	run, log := e.startRun(filepath.Join(e.dir, "running"), strings.ReplaceAll("touch SYNC/ready; while [ ! -e SYNC/go ]; do sleep 0.05; done", "SYNC", sync), "--rw", sync)
	waitFor(t, filepath.Join(sync, "ready"))
	ids := map[string]string{}
	code, stdout, _ := e.cli("sessions", "--state-dir", e.state)
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 && len(f[0]) == 32 {
			ids[f[1]] = f[0]
		}
	}
	if code != 0 || len(ids) != 3 {
		t.Fatalf("sessions: exit %d: %s", code, stdout)
	}

	for _, bad := range []string{"soon", "-1h", "3", "1.5d"} {
		code, _, stderr := e.cli("sessions", "--prune", "--older-than", bad, "--state-dir", e.state)
		if code != exitUsage || !strings.Contains(stderr, `--older-than "`+bad+`": want a duration such as 90m, 36h or 7d`) {
			t.Errorf("--older-than %q: exit %d: %s", bad, code, stderr)
		}
	}
	if code, _, stderr := e.cli("sessions", "--force", "--state-dir", e.state); code != exitUsage || !strings.Contains(stderr, "go with --prune") {
		t.Errorf("--force without --prune: exit %d: %s", code, stderr)
	}
	if stdout := e.cliCheck(0, "sessions", "--prune", "--older-than", "1h", "--state-dir", e.state); !strings.Contains(stdout, "# removed 0 session(s)") {
		t.Errorf("--older-than 1h removed something:\n%s", stdout)
	}

	stdout = e.cliCheck(0, "sessions", "--prune", "--state-dir", e.state)
	want := []string{"removed " + ids["applied"] + "  applied  ", "# kept " + ids["staged"] + ": its change set is kept (staged): apply or discard it first, or prune with --force to drop it",
		"# kept " + ids["running"] + ": it is running", "# removed 1 session(s) from the state dir"}
	for _, w := range want {
		if !strings.Contains(stdout, w) {
			t.Errorf("prune: no %q in\n%s", w, stdout)
		}
	}
	if _, err := os.Stat(filepath.Join(applied, "statement.json")); err != nil {
		t.Errorf("prune touched the output dir: %v", err)
	}
	if code, _, stderr := e.cli("diff", "--state-dir", e.state, staged); code != 0 {
		t.Errorf("diff of the staged session after prune: exit %d: %s", code, stderr)
	}

	stdout = e.cliCheck(0, "sessions", "--prune", "--force", "--state-dir", e.state)
	if !strings.Contains(stdout, "removed "+ids["staged"]+"  staged  ") || !strings.Contains(stdout, "its change set was removed with it: --force") ||
		!strings.Contains(stdout, "# kept "+ids["running"]+": it is running") {
		t.Errorf("prune --force:\n%s", stdout)
	}
	os.WriteFile(filepath.Join(sync, "go"), nil, 0o644)
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, log)
	}
	if stdout = e.cliCheck(0, "sessions", "--state-dir", e.state); !strings.Contains(stdout, ids["running"]+"  applied") || strings.Count(stdout, "\n") != 2 {
		t.Errorf("after prune --force, the running session's run ended:\n%s", stdout)
	}
}
