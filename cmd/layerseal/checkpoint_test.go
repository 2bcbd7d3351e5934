package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
)

// waitFor polls until p exists.
func waitFor(t *testing.T, p string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Lstat(p); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", p)
}

// startRun starts `layerseal run` with script as the agent and returns the
// running supervisor.
func (e *env) startRun(out, script string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
	e.t.Helper()
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state}, extra...)
	args = append(args, "--", "/bin/sh", "-ec", script)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	return cmd, &log
}

// TestCheckpointsEndToEnd runs a real agent for a few seconds and takes
// checkpoints by request and by SIGUSR1 while it runs, then verifies the
// chain, its binding to the statement, diffs, and the refusals.
func TestCheckpointsEndToEnd(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"keep.txt": "keep", "gone.txt": "gone"})
	out := filepath.Join(e.dir, "run")
	sync := filepath.Join(e.dir, "sync")
	if err := os.Mkdir(sync, 0o777); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(`echo one > a.txt; touch SYNC/ready1
while [ ! -e SYNC/go1 ]; do sleep 0.05; done
echo two > b.txt; rm gone.txt; touch SYNC/ready2
while [ ! -e SYNC/go2 ]; do sleep 0.05; done`, "SYNC", sync)
	run, log := e.startRun(out, script, "--rw", sync)
	waitFor(t, filepath.Join(sync, "ready1"))

	code, stdout, stderr := e.cli("checkpoint", "--state-dir", e.state, out)
	if code != 0 || !strings.HasPrefix(stdout, "checkpoint 1: ") {
		t.Fatalf("checkpoint: exit %d: %s%s", code, stdout, stderr)
	}
	code, stdout, _ = e.cli("sessions", "--state-dir", e.state, "--json")
	var sessions []struct {
		State   string `json:"state"`
		Out     string `json:"out"`
		Changes int    `json:"changes"`
	}
	// A running session's changes are its last checkpoint's: a.txt and
	// the workspace root it was made in.
	if err := json.Unmarshal([]byte(stdout), &sessions, json.RejectUnknownMembers(false)); err != nil || code != 0 ||
		len(sessions) != 1 || sessions[0].State != "running" || sessions[0].Changes != 2 {
		t.Errorf("sessions: exit %d: %s (%v), want running with 2 changes", code, stdout, err)
	}

	// SIGUSR1 to the supervisor takes a checkpoint and does not reach
	// the agent (whose default action would end it).
	if err := run.Process.Signal(unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, filepath.Join(out, "checkpoints", "000002.json"))
	if err := os.WriteFile(filepath.Join(sync, "go1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, filepath.Join(sync, "ready2"))
	code, stdout, stderr = e.cli("checkpoint", "--json", "--state-dir", e.state, out)
	var third struct {
		Checkpoint int    `json:"checkpoint"`
		File       string `json:"file"`
	}
	if err := json.Unmarshal([]byte(stdout), &third); code != 0 || err != nil || third.Checkpoint != 3 || filepath.Base(third.File) != "000003.json" {
		t.Fatalf("checkpoint --json: exit %d (%v): %s%s", code, err, stdout, stderr)
	}
	os.WriteFile(filepath.Join(sync, "go2"), nil, 0o644)
	if err := run.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, log)
	}

	cp := func(n int) string { return filepath.Join(out, "checkpoints", "00000"+string(rune('0'+n))+".json") }
	statement := filepath.Join(out, "statement.json")
	second := e.cliCheck(0, "verify", "--key", e.pub, cp(2))
	if !strings.Contains(second, "checkpoint 2, and the 1 checkpoint before it in its chain") {
		t.Errorf("verify of the second of three checkpoints:\n%s", second)
	}
	if !strings.Contains(second, "unchanged since checkpoint 1") {
		t.Errorf("checkpoint 2 (after SIGUSR1, nothing changed): %s", second)
	}
	// Checkpoint 3 walked after checkpoint 1 and lists only its difference.
	if got := e.cliCheck(0, "verify", "--key", e.pub, cp(3)); !strings.Contains(got, "3 change(s) listed since checkpoint 1") {
		t.Errorf("checkpoint 3: %s", got)
	}
	if got := e.cliCheck(0, "verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), statement); !strings.Contains(got, "checkpoint chain: 3 checkpoint(s)") {
		t.Errorf("verify statement: %s", got)
	}
	// The output dir stands for its statement, bound to its launch record.
	if got := e.cliCheck(0, "verify", "--key", e.pub, out); !strings.Contains(got, "checkpoint chain: 3 checkpoint(s)") {
		t.Errorf("verify OUT: %s", got)
	}
	if got, want := e.cliCheck(0, "show", out), e.cliCheck(0, "show", statement); got != want {
		t.Errorf("show OUT:\n%s\nshow STATEMENT:\n%s", got, want)
	}
	var d struct {
		Changes []struct {
			Path   attest.Path   `json:"path"`
			Change attest.Change `json:"change"`
		} `json:"changes"`
	}
	diff := e.cliCheck(0, "diff", "--json", "--key", e.pub, cp(1), cp(3))
	if err := json.Unmarshal([]byte(diff), &d, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	// The root's mtime moved with the entries made and removed in it.
	if len(d.Changes) != 3 || d.Changes[0].Path != attest.Root || d.Changes[0].Change != attest.Metadata ||
		d.Changes[1].Path != "b.txt" || d.Changes[1].Change != attest.Added ||
		d.Changes[2].Path != "gone.txt" || d.Changes[2].Change != attest.Deleted {
		t.Errorf("diff 1→3: %s", diff)
	}
	// and says so, in both forms.
	if text := e.cliCheck(0, "diff", "--key", e.pub, cp(1), cp(3)); !strings.Contains(text, "m  .\tmtime ") || !strings.Contains(diff, `"meta":{"mtime":{"old_ns":`) {
		t.Errorf("diff 1→3 does not say the root's mtime moved:\n%s\n%s", text, diff)
	}
	// show of a checkpoint lists all the changes so far, as of a statement.
	// (A statement's show goes on with its exit, counts and session.)
	changeLines := func(s string) string { return s[:strings.Index(s, "# 4 change(s)")+len("# 4 change(s)")] }
	if got, want := e.cliCheck(0, "show", "--key", e.pub, cp(3)), e.cliCheck(0, "show", "--key", e.pub, statement); !strings.Contains(got, "# 4 change(s)") || !strings.Contains(want, "# 4 change(s)") || changeLines(got) != changeLines(want) {
		t.Errorf("show checkpoint 3:\n%s\nshow statement:\n%s", got, want)
	}
	if got := e.cliCheck(0, "diff", "--key", e.pub, cp(3), statement); !strings.HasPrefix(got, "# 0 change(s)") {
		t.Errorf("diff checkpoint 3 → statement: %s", got)
	}

	// Refusals.
	e.cliCheck(1, "checkpoint", "--state-dir", e.state, out)                  // finished
	e.cliCheck(1, "checkpoint", "--state-dir", e.state, filepath.Join(e.dir)) // unknown
	other := e.key + "2"
	e.cliCheck(0, "keygen", "--out", other)
	e.cliCheck(1, "verify", "--key", other+".pub", cp(2))
	broken := filepath.Join(e.dir, "broken")
	os.CopyFS(broken, os.DirFS(out))
	os.Remove(filepath.Join(broken, "checkpoints", "000002.json"))
	e.cliCheck(1, "verify", "--key", e.pub, filepath.Join(broken, "statement.json"))
	e.cliCheck(1, "verify", "--key", e.pub, filepath.Join(broken, "checkpoints", "000003.json"))
	os.Rename(filepath.Join(broken, "checkpoints", "000003.json"), filepath.Join(broken, "checkpoints", "000002.json"))
	e.cliCheck(1, "verify", "--key", e.pub, filepath.Join(broken, "checkpoints", "000002.json"))
	e.cliCheck(1, "verify", "--key", e.pub, filepath.Join(broken, "statement.json"))

	// A diff across sessions.
	out2 := filepath.Join(e.dir, "run2")
	if code, log := e.run(out2, "echo x > x", "--checkpoint-every", "50ms"); code != 0 {
		t.Fatalf("second run: %s", log)
	}
	e.cliCheck(1, "diff", cp(1), filepath.Join(out2, "statement.json"))
}

// TestCheckpointEveryInterval: an idle agent gets unchanged checkpoints at
// the interval, and the statement binds the chain.
func TestCheckpointEveryInterval(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo hi > f; sleep 2", "--checkpoint-every", "300ms"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	all, _ := filepath.Glob(filepath.Join(out, "checkpoints", "*.json"))
	var names []string
	for _, n := range all {
		if attest.LooksLikeCheckpoint(filepath.Base(n)) {
			names = append(names, n)
		}
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(filepath.Dir(n), attest.HeadFile(filepath.Base(n)))); err != nil {
			t.Errorf("no head beside %s: %v", n, err)
		}
	}
	if len(all) != 2*len(names) {
		t.Errorf("%d checkpoints, %d files: not one head beside each", len(names), len(all))
	}
	if len(names) < 3 {
		t.Fatalf("%d checkpoints in 2 s at 300ms", len(names))
	}
	unchanged := 0
	for _, n := range names {
		got := e.cliCheck(0, "verify", "--key", e.pub, n)
		if strings.Contains(got, "unchanged since") {
			unchanged++
		}
	}
	if unchanged < len(names)-2 {
		t.Errorf("%d of %d checkpoints of an idle agent unchanged", unchanged, len(names))
	}
	if got := e.cliCheck(0, "verify", "--key", e.pub, filepath.Join(out, "statement.json")); !strings.Contains(got, "checkpoint chain:") {
		t.Errorf("verify: %s", got)
	}
}

// cliCheck runs layerseal and requires exit code want; it returns stdout.
func (e *env) cliCheck(want int, args ...string) string {
	e.t.Helper()
	code, stdout, stderr := e.cli(args...)
	if code != want {
		e.t.Errorf("layerseal %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, stdout, stderr)
	}
	return stdout
}
