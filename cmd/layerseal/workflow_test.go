package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/overlay"
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
	// The gate is in a directory the agent gets writable (--rw), a bind
	// mount of the host's: a file the test makes there shows at once. (The
	// rest of /tmp is the host's under a layer of the agent's own, whose
	// view of the host need not follow later changes.)
	gates := filepath.Join(e.dir, "gates")
	if err := os.MkdirAll(gates, 0o755); err != nil {
		e.t.Fatal(err)
	}
	gate := filepath.Join(gates, filepath.Base(out)+".gate")
	full := script + "\ntouch started\nwhile [ ! -e " + gate + " ]; do sleep 0.05; done\n" + after
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--rw", gates}, extra...)
	args = append(args, "--", "/bin/sh", "-ec", full)
	before, _ := filepath.Glob(filepath.Join(e.state, "sessions", "*", "upper", "started"))
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
		if ups, _ := filepath.Glob(filepath.Join(e.state, "sessions", "*", "upper", "started")); len(ups) > len(before) {
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

// TestConflictNotOverwritten: a user's edit to the workspace while the
// agent runs is a conflict: the statement lists it (incomplete, code
// conflict), the automatic apply applies nothing and keeps the change set
// staged naming the path, `apply` refuses the same way, and `apply --skip`
// applies the rest, leaving the edit alone.
func TestConflictNotOverwritten(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"README.md": "launch\n", "other.txt": "o\n"})
	out := filepath.Join(e.dir, "run")
	b := e.runBackground(out, "", "echo agent > README.md; echo agent > other.txt")
	if err := os.WriteFile(filepath.Join(e.ws, "README.md"), []byte("user edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, log := b.finish(t)
	if code != 0 || !strings.Contains(log, `"README.md"`) || !strings.Contains(log, "staged") {
		t.Fatalf("run with a conflict: exit %d, want 0 naming README.md as staged\n%s", code, log)
	}
	if got := readString(t, filepath.Join(e.ws, "README.md")); got != "user edit\n" {
		t.Errorf("README.md after the run: %q: the user's edit was overwritten", got)
	}
	if _, err := os.Lstat(filepath.Join(out, "checkpoints")); err == nil {
		t.Error("a run that took no checkpoint left an empty checkpoints dir")
	}
	if got := readString(t, filepath.Join(e.ws, "other.txt")); got != "o\n" {
		t.Errorf("other.txt after a run with a conflict: %q, want it staged, not applied", got)
	}
	got := e.show(filepath.Join(out, "statement.json"))
	found := false
	for _, r := range got.Incomplete {
		found = found || r.Code == attest.Conflict && r.Path == "README.md"
	}
	if !found || got.Complete {
		t.Errorf("the statement does not list the conflict: %+v", got.Incomplete)
	}
	msg := e.mustCLI(1, "apply", "--state-dir", e.state, out)
	if !strings.Contains(msg, `"README.md"`) || !strings.Contains(msg, "--skip") {
		t.Errorf("apply over a conflict: %s", msg)
	}
	e.mustCLI(1, "apply", "--skip", "--state-dir", e.state, out, "no-such-path")
	code, stdout, stderr := e.cli("apply", "--skip", "--json", "--state-dir", e.state, out, "README.md")
	var applied struct {
		Session sessionJSON `json:"session"`
		Left    []any       `json:"left"`
	}
	if err := json.Unmarshal([]byte(stdout), &applied); code != 0 || err != nil || applied.Session.State != "staged" || applied.Left == nil {
		t.Errorf("apply --skip --json: exit %d (%v): %s%s", code, err, stdout, stderr)
	}
	if got := readString(t, filepath.Join(e.ws, "README.md")); got != "user edit\n" {
		t.Errorf("README.md after apply --skip: %q", got)
	}
	if got := readString(t, filepath.Join(e.ws, "other.txt")); got != "agent\n" {
		t.Errorf("other.txt after apply --skip: %q", got)
	}
	// The skipped path stays staged, for a later apply or discard.
	id := e.sessionOf(out)
	if s := e.sessions()[id]; s.State != "staged" {
		t.Errorf("sessions after apply --skip: %+v, want staged", s)
	}
	if d := e.mustCLI(0, "diff", "--state-dir", e.state, out); !strings.Contains(d, "README.md") || strings.Contains(d, "other.txt") {
		t.Errorf("diff after apply --skip README.md:\n%s", d)
	}
	if sh := e.mustCLI(0, "show", "--state-dir", e.state, filepath.Join(out, "statement.json")); !strings.Contains(sh, "1 still staged") {
		t.Errorf("show does not say what is still staged:\n%s", sh)
	}
	if sh := e.mustCLI(0, "show", "--state-dir", t.TempDir(), filepath.Join(out, "statement.json")); !strings.Contains(sh, "the session is not in this state dir") {
		t.Errorf("show with a state dir that lacks the session:\n%s", sh)
	}
	e.mustCLI(1, "apply", "--state-dir", e.state, out) // still the conflict
	code, stdout, stderr = e.cli("discard", "--json", "--state-dir", e.state, out)
	var discarded struct {
		Session sessionJSON `json:"session"`
	}
	if err := json.Unmarshal([]byte(stdout), &discarded); code != 0 || err != nil || discarded.Session.State != "applied" {
		t.Errorf("discard --json: exit %d (%v): %s%s", code, err, stdout, stderr)
	}
	if s := e.sessions()[id]; s.State != "applied" || s.Discarded != 1 {
		t.Errorf("sessions after discarding the skipped path: %+v, want applied with 1 discarded", s)
	}
	if got := readString(t, filepath.Join(e.ws, "README.md")); got != "user edit\n" {
		t.Errorf("README.md after discarding it: %q", got)
	}
}

// TestConflictWhileStaged: edits made while a change set is staged (an
// edit in place, a removal, a `git status` rewriting .git/index) are
// conflicts apply refuses; `apply --force PATH` overwrites just the named
// ones.
func TestConflictWhileStaged(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": "a\n", "gone.txt": "g\n", ".git/index": "i1", "keep.txt": "k\n"})
	// The stand-in indexes are no git index: allowed.
	out, _ := e.stagedRun("s", "echo agent > a.txt; echo agent > gone.txt; echo i2 > .git/index; echo agent > keep.txt", "--allow", ".git/index")
	// Same size, and the old mtime put back: only the ctime tells.
	if err := os.WriteFile(filepath.Join(e.ws, "a.txt"), []byte("u\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	if err := os.Chtimes(filepath.Join(e.ws, "a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.ws, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ws, ".git/index"), []byte("i3"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := e.mustCLI(1, "apply", "--state-dir", e.state, out)
	for _, p := range []string{`"a.txt"`, `"gone.txt"`, `".git/index"`} {
		if !strings.Contains(msg, p) {
			t.Errorf("apply does not name %s:\n%s", p, msg)
		}
	}
	if !strings.Contains(msg, "`git status` included") {
		t.Errorf("apply does not say why .git/index changed:\n%s", msg)
	}
	if strings.Contains(msg, "keep.txt") {
		t.Errorf("apply names keep.txt, which nobody else changed:\n%s", msg)
	}
	if got := readString(t, filepath.Join(e.ws, "keep.txt")); got != "k\n" {
		t.Errorf("a refused apply applied keep.txt: %q", got)
	}
	msg = e.mustCLI(1, "apply", "--force", "--state-dir", e.state, out, ".git/index")
	if !strings.Contains(msg, `"a.txt"`) || strings.Contains(msg, `".git/index"`) {
		t.Errorf("apply --force .git/index:\n%s", msg)
	}
	e.mustCLI(0, "apply", "--force", "--state-dir", e.state, out, ".git/index", "a.txt", "gone.txt")
	for p, want := range map[string]string{"a.txt": "agent\n", "gone.txt": "agent\n", ".git/index": "i2\n", "keep.txt": "agent\n"} {
		if got := readString(t, filepath.Join(e.ws, p)); got != want {
			t.Errorf("%s after apply --force: %q, want %q", p, got, want)
		}
	}
}

type sessionJSON struct {
	ID        string        `json:"id"`
	State     string        `json:"state"`
	Ended     string        `json:"ended"`
	Skipped   []attest.Path `json:"skipped"`
	Discarded int           `json:"discarded"`
}

func (e *env) sessions() map[string]sessionJSON {
	e.t.Helper()
	stdout := e.mustCLI(0, "sessions", "--json", "--state-dir", e.state)
	var list []sessionJSON
	if err := json.Unmarshal([]byte(stdout), &list, json.RejectUnknownMembers(false)); err != nil {
		e.t.Fatalf("sessions --json: %v\n%s", err, stdout)
	}
	m := map[string]sessionJSON{}
	for _, s := range list {
		m[s.ID] = s
	}
	return m
}

// TestOutDirReuse: an output dir used again names its newest session, so
// diff and discard never reach the older one; sessions are reachable by
// id; `sessions` shows each one's state under a header.
func TestOutDirReuse(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(e.dir, "reuse")
	// Four sessions in one output dir: the lookup that took the first
	// record found (by id order) reaches an older one in all but 1 in 24
	// runs.
	var ids []string
	for i := range 4 {
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
		e.stagedRun("reuse", fmt.Sprintf("echo %d > f%d.txt", i, i))
		ids = append(ids, e.sessionOf(out))
		d := e.mustCLI(0, "diff", "--state-dir", e.state, out)
		if !strings.Contains(d, fmt.Sprintf("A  f%d.txt", i)) || strings.Count(d, "A  f") != 1 {
			t.Fatalf("diff of the output dir used for the %d. time:\n%s", i+1, d)
		}
		if i < 3 {
			e.mustCLI(0, "discard", "--state-dir", e.state, out)
		}
	}
	got := e.sessions()
	for i, id := range ids {
		want := "discarded"
		if i == 3 {
			want = "staged"
		}
		if got[id].State != want {
			t.Errorf("session %d (%s): state %q, want %q", i+1, id, got[id].State, want)
		}
	}
	list := e.mustCLI(0, "sessions", "--state-dir", e.state)
	if !strings.HasPrefix(list, "ID") || !strings.Contains(list, "STATE") || !strings.Contains(list, "WORKSPACE") || !strings.Contains(list, ids[3]) {
		t.Errorf("sessions:\n%s", list)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, ids[0]); !strings.Contains(msg, "already discarded") {
		t.Errorf("apply of a discarded session by id: %s", msg)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, ids[3])
	if got := readString(t, filepath.Join(e.ws, "f3.txt")); got != "3\n" {
		t.Errorf("f3.txt: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "f0.txt")); err == nil {
		t.Error("a discarded session's f0.txt was applied")
	}
	if got := e.sessions(); got[ids[3]].State != "applied" || got[ids[3]].Ended == "" {
		t.Errorf("sessions after apply: %+v", got[ids[3]])
	}
}

// shortState gives e a state dir with a short path: a session's control
// socket path must fit a unix socket address.
func (e *env) shortState() {
	e.t.Helper()
	short, err := os.MkdirTemp("/tmp", "ls")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { os.RemoveAll(short) })
	e.state = short
}

// TestRecoverBindsCheckpoints: recover of a session that took checkpoints
// binds their chain, so its statement verifies (exit 2: incomplete, with
// unobserved-end), and says the agent's exit is unknown.
func TestRecoverBindsCheckpoints(t *testing.T) {
	e := newEnv(t)
	e.shortState()
	write(t, e.ws, map[string]string{"a.txt": "a\n"})
	out := filepath.Join(e.dir, "run")
	b := e.runBackground(out, "echo one > one.txt", "")
	e.mustCLI(0, "checkpoint", "--state-dir", e.state, out)
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b.cmd.Wait()
	id := e.sessionOf(out)
	if s := e.sessions()[id]; s.State != "interrupted" {
		t.Errorf("sessions after the supervisor died: %+v, want interrupted", s)
	}
	if list := e.mustCLI(0, "sessions", "--state-dir", e.state); !strings.Contains(list, "`layerseal recover --key KEY --state-dir "+e.state+" "+id+"`") {
		t.Errorf("sessions does not suggest recover with the state dir:\n%s", list)
	}
	if msg := e.mustCLI(1, "diff", "--state-dir", e.state, out); !strings.Contains(msg, "layerseal recover --key KEY --state-dir "+e.state+" "+id) {
		t.Errorf("diff before recover: %s", msg)
	}
	e.mustCLI(0, "recover", "--key", e.key, "--state-dir", e.state, out)
	if s := e.sessions()[id]; s.State != "staged" {
		t.Errorf("sessions after recover: %+v, want staged", s)
	}
	code, stdout, stderr := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), filepath.Join(out, "statement.json"))
	if code != exitIncomplete || !strings.Contains(stdout, "unobserved-end") || !strings.Contains(stdout, "1 checkpoint(s), bound") {
		t.Errorf("verify after recover: exit %d, want %d with the chain bound\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	js := e.mustCLI(0, "show", "--json", "--key", e.pub, filepath.Join(out, "statement.json"))
	if !strings.Contains(js, `"unknown":true`) || strings.Contains(js, "SIGKILL") || strings.Contains(js, `"code":137`) {
		t.Errorf("show --json of a recovered statement: the exit is not unknown:\n%s", js)
	}
}

// TestPolicyStages: under the default `apply: auto`, a run with
// violations, a non-zero exit or a signal is staged, not applied, and
// says why; `apply: always` applies all the same. layerseal.yaml is
// protected although the workspace has none, and .git changed in a run
// with violations is called out.
func TestPolicyStages(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": "a\n", ".git/HEAD": "ref: refs/heads/main\n"})
	for _, c := range []struct {
		name, script, config string
		code                 int
		applied              bool
		want                 []string
	}{
		{"violation", "echo x > new.txt; echo 'apply: always' > layerseal.yaml; echo y > .git/HEAD", "", 0, false,
			[]string{"protected path(s)", `rule "layerseal.yaml"`, "in .git"}},
		{"exit", "echo x > new.txt; exit 3", "", 3, false, []string{"status 3", "staged"}},
		{"signal", "echo x > new.txt; kill -TERM $$", "", 128 + 15, false, []string{"SIGTERM", "staged"}},
		{"always", "echo x > new.txt; exit 3", "apply: always\n", 3, true, nil},
		{"clean", "echo x > new.txt", "", 0, true, nil},
	} {
		os.Remove(filepath.Join(e.ws, "new.txt"))
		var extra []string
		if c.config != "" {
			cfg := filepath.Join(e.dir, c.name+".yaml")
			if err := os.WriteFile(cfg, []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			extra = []string{"--config", cfg}
		}
		code, log := e.run(filepath.Join(e.dir, c.name), c.script, extra...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, code, c.code, log)
		}
		_, err := os.Lstat(filepath.Join(e.ws, "new.txt"))
		if applied := err == nil; applied != c.applied {
			t.Errorf("%s: applied %t, want %t\n%s", c.name, applied, c.applied, log)
		}
		for _, w := range c.want {
			if !strings.Contains(log, w) {
				t.Errorf("%s: the run does not say %q:\n%s", c.name, w, log)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "layerseal.yaml")); err == nil {
		t.Error("the agent wrote layerseal.yaml into the workspace")
	}
}

// TestProcessFileDefaults: a --process file that names no capabilities
// gets the default set (no CAP_SYS_ADMIN) and no_new_privileges; one
// that names a command, given with a command after -- too, is a usage
// error.
func TestProcessFileDefaults(t *testing.T) {
	e := newEnv(t)
	proc := filepath.Join(e.dir, "process.json")
	if err := os.WriteFile(proc, []byte(`{"args": ["/bin/sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status > status"], "cwd": "/", "user": {"uid": 0, "gid": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The process's cwd is "/": point it at the workspace.
	b, _ := os.ReadFile(proc)
	if err := os.WriteFile(proc, []byte(strings.Replace(string(b), `"cwd": "/"`, `"cwd": "`+e.ws+`"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	base := []string{"run", "--workspace", e.ws, "--key", e.key, "--state-dir", e.state, "--process", proc}
	if code, _, stderr := e.cli(append(base, "--out", filepath.Join(e.dir, "o1"), "--", "true")...); code != exitUsage || !strings.Contains(stderr, "--process") {
		t.Errorf("--process naming a command, with a command: exit %d, want %d:\n%s", code, exitUsage, stderr)
	}
	if code, stdout, stderr := e.cli(append(base, "--out", filepath.Join(e.dir, "o2"))...); code != 0 {
		t.Fatalf("run --process: exit %d\n%s%s", code, stdout, stderr)
	}
	status := readString(t, filepath.Join(e.ws, "status"))
	var capEff uint64
	var nnp int
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%x", &capEff)
		}
		if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok {
			fmt.Sscanf(strings.TrimSpace(v), "%d", &nnp)
		}
	}
	const capSysAdmin = 21
	if capEff&(1<<capSysAdmin) != 0 || capEff == 0 || nnp != 1 {
		t.Errorf("agent of a --process file without capabilities: CapEff %#x, NoNewPrivs %d (want the default set without CAP_SYS_ADMIN, and 1)\n%s", capEff, nnp, status)
	}
}

// sigintAtEnv: N, the test binary acting as layerseal apply sends itself
// SIGINT before apply step N, as a Ctrl-C would.
const sigintAtEnv = "LAYERSEAL_TEST_SIGINT_AT"

func init() {
	at, _ := strconv.Atoi(os.Getenv(sigintAtEnv))
	if at <= 0 {
		return
	}
	n := 0
	applyProgress = func(string, attest.Path) {
		if n++; n == at {
			unix.Kill(os.Getpid(), unix.SIGINT)
			time.Sleep(100 * time.Millisecond) // let the signal arrive
		}
	}
}

// TestInterruptRun: a Ctrl-C (SIGINT to the supervisor) is passed on to
// the agent; a second one within 3 s kills the agent's namespace even
// though the agent ignores both; the statement records the kill and the
// change set is staged, not applied. An agent that a first Ctrl-C ends
// gets its change set staged too.
func TestInterruptRun(t *testing.T) {
	e := newEnv(t)
	e.shortState()
	write(t, e.ws, map[string]string{"a.txt": "a\n"})
	out := filepath.Join(e.dir, "twice")
	b := e.runBackground(out, "trap '' INT TERM; echo x > new.txt", "sleep 1000")
	b.cmd.Process.Signal(unix.SIGINT)
	time.Sleep(500 * time.Millisecond)
	if b.cmd.ProcessState != nil {
		t.Fatalf("the run ended at the first Ctrl-C:\n%s", b.log)
	}
	b.cmd.Process.Signal(unix.SIGINT)
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the run did not end after a second Ctrl-C:\n%s", b.log)
	}
	log := b.log.String()
	if code := b.cmd.ProcessState.ExitCode(); code != 128+9 || !strings.Contains(log, "press it again") || !strings.Contains(log, "second Ctrl-C") || !strings.Contains(log, "staged") {
		t.Errorf("run stopped by two Ctrl-Cs: exit %d, want %d, saying so:\n%s", code, 128+9, log)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "new.txt")); err == nil {
		t.Error("the interrupted run's change set was applied")
	}
	js := e.mustCLI(0, "show", "--json", filepath.Join(out, "statement.json"))
	if !strings.Contains(js, `"signal":"SIGKILL"`) || !strings.Contains(js, `"interrupt":"SIGINT"`) {
		t.Errorf("the statement does not record the kill:\n%s", js)
	}
	if d := e.mustCLI(0, "diff", "--state-dir", e.state, out); !strings.Contains(d, "A  new.txt") {
		t.Errorf("the staged change set:\n%s", d)
	}

	out = filepath.Join(e.dir, "once")
	b = e.runBackground(out, "echo y > new2.txt", "exec sleep 1000")
	b.cmd.Process.Signal(unix.SIGINT)
	code, log := b.finish(t)
	if code != 128+2 || !strings.Contains(log, "staged") {
		t.Errorf("agent ended by a Ctrl-C: exit %d, want %d, staged:\n%s", code, 128+2, log)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "new2.txt")); err == nil {
		t.Error("the change set of an agent ended by Ctrl-C was applied")
	}

	// An agent that takes the Ctrl-C and goes on to exit 0 (an interactive
	// shell in which Ctrl-C stopped a command): the interrupt did not end
	// the run, so the change set is applied, and the statement records the
	// interrupt.
	out = filepath.Join(e.dir, "caught")
	b = e.runBackground(out, "trap 'exit 0' INT; echo z > new3.txt", "sleep 1000 & wait")
	b.cmd.Process.Signal(unix.SIGINT)
	code, log = b.finish(t)
	if code != 0 || strings.Contains(log, "layerseal: staged") {
		t.Errorf("agent that exits 0 after a Ctrl-C: exit %d, want 0, applied:\n%s", code, log)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "new3.txt")); err != nil {
		t.Errorf("the change set of an agent that took the Ctrl-C and exited 0 was not applied: %v", err)
	}
	if sh := e.mustCLI(0, "show", filepath.Join(out, "statement.json")); !strings.Contains(sh, "# exit: 0, after an interrupt (SIGINT)") {
		t.Errorf("show of an interrupted run:\n%s", sh)
	}
}

// TestInterruptApply: a Ctrl-C during `layerseal apply` stops it at the
// next step with a message saying how to finish, and that finishes it.
func TestInterruptApply(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	out, view := e.stagedRun("s", "for i in 1 2 3 4 5 6 7 8 9; do echo $i > n$i; done; rm del.txt; echo c > file.txt")
	code, stdout, stderr := e.cliEnv([]string{sigintAtEnv + "=5"}, "apply", "--state-dir", e.state, out)
	if code != exitFailed || !strings.Contains(stderr, "stopped part way") || !strings.Contains(stderr, "layerseal apply "+e.sessionOf(out)) {
		t.Fatalf("apply interrupted: exit %d, want %d saying how to finish\n%s%s", code, exitFailed, stdout, stderr)
	}
	if d := treediff.Equal(view, e.manifest()); d == "" {
		t.Fatal("the interrupted apply finished all the same")
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if d := treediff.Equal(view, e.manifest()); d != "" {
		t.Errorf("after the resumed apply: %s", d)
	}
}

// TestMessages: what a new user meets says what happened and what to do.
func TestMessages(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"sub/f": "f"})
	out := filepath.Join(e.dir, "o")
	code, _, stderr := e.cli("run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--", "./agent.sh")
	if code != exitNotFound || strings.Count(stderr, "command not found") != 1 || !strings.Contains(stderr, `"./agent.sh"`) || !strings.Contains(stderr, "can be used again") {
		t.Errorf("run -- ./agent.sh: exit %d, want %d with one clean message:\n%s", code, exitNotFound, stderr)
	}
	if code, log := e.run(out, "pwd > ../pwd.txt", "--cwd", "sub", "--digest-cap", "1GB"); code != 0 {
		t.Errorf("the output dir of a command not found, used again (with --cwd sub, --digest-cap 1GB): exit %d\n%s", code, log)
	}
	if got := readString(t, filepath.Join(e.ws, "pwd.txt")); got != e.ws+"/sub\n" {
		t.Errorf("--cwd sub: the agent ran in %q", got)
	}
	if code, _, stderr := e.cli("run", "--workspace", e.ws, "--key", e.pub, "--out", filepath.Join(e.dir, "o2"), "--state-dir", e.state, "--", "true"); code != exitUsage || !strings.Contains(stderr, "is a public key") {
		t.Errorf("run --key KEY.pub: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := e.cli("recover", "--key", e.pub, "--state-dir", e.state, out); code != exitUsage || !strings.Contains(stderr, "is a public key") {
		t.Errorf("recover --key KEY.pub: exit %d\n%s", code, stderr)
	}
	_, log := e.run(filepath.Join(e.dir, "staged"), "echo x > x", "--stage")
	if n := strings.Count(log, "layerseal diff"); n != 1 {
		t.Errorf("run --stage says how to go on %d times:\n%s", n, log)
	}
	if code, stdout, _ := e.cli("--version"); code != 0 || !strings.Contains(stdout, layerseal.Version) || !strings.Contains(stdout, "module") {
		t.Errorf("--version: exit %d: %q", code, stdout)
	}
	_, help, _ := e.cli("run", "--help")
	for _, bad := range []string{"(default: 0)", "(default: 0s)", "--checkpoint-every layerseal"} {
		if strings.Contains(help, bad) {
			t.Errorf("run --help shows %q:\n%s", bad, help)
		}
	}
	if !strings.Contains(help, fmt.Sprint(overlay.DefaultMaxEntries)) {
		t.Errorf("run --help does not show the entry budget's default:\n%s", help)
	}
	_, kg, _ := e.cli("keygen", "--out", filepath.Join(e.dir, "k2"))
	for _, want := range []string{"key id:", "private key:", "public key:"} {
		if !strings.Contains(kg, want) {
			t.Errorf("keygen output lacks %q:\n%s", want, kg)
		}
	}
	if err := os.WriteFile(filepath.Join(e.ws, "layerseal.yaml"), []byte("exclude: node_modules\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, log := e.run(filepath.Join(e.dir, "o3"), "true"); code != exitUsage || !strings.Contains(log, "line 1: want a list of globs") {
		t.Errorf("exclude: node_modules: exit %d\n%s", code, log)
	}
}

// stepDelayEnv: a duration the test binary acting as layerseal apply
// waits before each apply step, so a small apply takes over a second.
const stepDelayEnv = "LAYERSEAL_TEST_STEP_DELAY"

func init() {
	d, err := time.ParseDuration(os.Getenv(stepDelayEnv))
	if err != nil || d <= 0 {
		return
	}
	applyProgress = func(string, attest.Path) { time.Sleep(d) }
}

// openPTY returns the two ends of a new pseudo-terminal, from a private
// devpts instance (a minimal guest need not have /dev/pts mounted).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("devpts", dir, "devpts", 0, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		t.Fatalf("mount a devpts instance: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	m, err := os.OpenFile(filepath.Join(dir, "ptmx"), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// TestApplyProgress: an apply that takes over a second shows its progress
// on a terminal, and nothing of it when stderr is not one.
func TestApplyProgress(t *testing.T) {
	e := newEnv(t)
	script := "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo $i > f$i; done"
	outTTY := filepath.Join(e.dir, "tty")
	master, slave := openPTY(t)
	// The run's walk, slowed down the same way, shows its entries.
	run := exec.Command(os.Args[0], "run", "--workspace", e.ws, "--key", e.key, "--out", outTTY, "--state-dir", e.state, "--stage", "--", "/bin/sh", "-c", script)
	run.Env = append(os.Environ(), cliEnv+"=1", stepDelayEnv+"=60ms")
	run.Stderr = slave
	var walk bytes.Buffer
	walkRead := make(chan struct{})
	go func() {
		defer close(walkRead)
		buf := make([]byte, 4096)
		for !strings.Contains(walk.String(), "staged, not applied") {
			n, err := master.Read(buf)
			walk.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	if err := run.Run(); err != nil {
		t.Fatalf("run on a terminal: %v\n%s", err, walk.String())
	}
	select {
	case <-walkRead:
	case <-time.After(5 * time.Second):
	}
	if !strings.Contains(walk.String(), "layerseal: reading the change set: ") || !strings.Contains(walk.String(), " entries, ") {
		t.Errorf("no progress of the walk on a terminal:\n%q", walk.String())
	}
	cmd := exec.Command(os.Args[0], "apply", "--state-dir", e.state, outTTY)
	cmd.Env = append(os.Environ(), cliEnv+"=1", stepDelayEnv+"=30ms")
	cmd.Stderr = slave
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	var shown bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			shown.Write(buf[:n])
			if err != nil || strings.Contains(shown.String(), "applied") {
				return
			}
		}
	}()
	if err := cmd.Run(); err != nil {
		t.Fatalf("apply on a terminal: %v\n%s\n%s", err, stdout.String(), shown.String())
	}
	select {
	case <-read:
	case <-time.After(5 * time.Second):
	}
	if !strings.Contains(shown.String(), "layerseal: applying: ") || !strings.Contains(shown.String(), " of 13 change(s)") {
		t.Errorf("no progress on a terminal:\n%q", shown.String())
	}
	// The same without a terminal: no progress line.
	if err := os.RemoveAll(e.ws); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(e.ws, 0o755)
	outPipe, _ := e.stagedRun("pipe", script)
	code, _, stderr := e.cliEnv([]string{stepDelayEnv + "=30ms"}, "apply", "--state-dir", e.state, outPipe)
	if code != 0 || strings.Contains(stderr, "applying: ") || strings.Contains(stderr, "\r") {
		t.Errorf("apply without a terminal: exit %d, stderr %q", code, stderr)
	}
}

// TestShowReport: show and verify print the exit, each violation with rule
// and action, each excluded subtree with counts, the counts to apply and
// where the session stands, and the reasons; show --json carries them.
func TestShowReport(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"layerseal.yaml": "protected: [.env]\nexclude: [node_modules]\n", "a.txt": "a\n"})
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo S=1 > .env; mkdir -p node_modules/p; echo x > node_modules/p/i.js; echo new > new.txt"); code != 0 || !strings.Contains(log, "staged") {
		t.Fatalf("run with a violation: exit %d, want 0 and staged\n%s", code, log)
	}
	statement := filepath.Join(out, "statement.json")
	sh := e.mustCLI(0, "show", "--key", e.pub, "--state-dir", e.state, statement)
	code, ver, stderr := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), "--state-dir", e.state, statement)
	if code != wantVerifyExit(t) {
		t.Fatalf("verify: exit %d\n%s%s", code, ver, stderr)
	}
	for _, want := range []string{"exit: 0", `violation: .env (rule ".env"): reverted`, "excluded: node_modules: 3 entries, 2 bytes",
		"change set: 2 of 3 change(s) to apply after the sweep, and 1 excluded subtree(s); staged: 2 change(s) not applied yet"} {
		if !strings.Contains(sh, "# "+want) {
			t.Errorf("show lacks %q:\n%s", want, sh)
		}
		if !strings.Contains(ver, want) {
			t.Errorf("verify lacks %q:\n%s", want, ver)
		}
	}
	var js struct {
		Exit       struct{ Code int } `json:"exit"`
		Violations []struct {
			Path   attest.Path   `json:"path"`
			Rule   string        `json:"rule"`
			Action attest.Action `json:"action"`
		} `json:"violations"`
		Excluded []struct {
			Path    attest.Path `json:"path"`
			Entries uint64      `json:"entries"`
		} `json:"excluded"`
		Count        uint64 `json:"count"`
		AppliedCount uint64 `json:"applied_count"`
		Session      struct {
			State   string `json:"state"`
			ToApply int    `json:"to_apply"`
		} `json:"session"`
	}
	raw := e.mustCLI(0, "show", "--json", "--state-dir", e.state, statement)
	if err := json.Unmarshal([]byte(raw), &js, json.RejectUnknownMembers(false)); err != nil {
		t.Fatalf("show --json: %v\n%s", err, raw)
	}
	if len(js.Violations) != 1 || js.Violations[0].Rule != ".env" || js.Violations[0].Action != attest.Reverted ||
		len(js.Excluded) != 1 || js.Excluded[0].Entries != 3 || js.Count != 3 || js.AppliedCount != 2 || js.Session.State != "staged" {
		t.Errorf("show --json: %+v\n%s", js, raw)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if sh := e.mustCLI(0, "show", "--state-dir", e.state, statement); !strings.Contains(sh, "; applied: 2 change(s)") {
		t.Errorf("show after apply:\n%s", sh)
	}
}
