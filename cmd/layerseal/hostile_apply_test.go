package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/policy"
)

// applyCase is a workspace and a run whose apply must not reach beyond
// what was examined.
type applyCase struct {
	e   *env
	out string
	log string
}

// statement reads and verifies the run's statement.
func (c *applyCase) statement(t *testing.T) *attest.Statement {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.out, "statement.json"))
	if err != nil {
		t.Fatalf("no statement: %v\n%s", err, c.log)
	}
	pub, err := attest.LoadPublicKey(c.e.pub)
	if err != nil {
		t.Fatal(err)
	}
	launch, _ := os.ReadFile(filepath.Join(c.out, "launch.json"))
	st, err := attest.VerifyStatement(b, pub, launch)
	if err != nil {
		t.Fatalf("statement does not verify: %v", err)
	}
	return st
}

func hasCode(st *attest.Statement, code attest.Code) bool {
	return slices.ContainsFunc(st.Incomplete, func(r attest.Reason) bool { return r.Code == code })
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return string(b)
}

// TestHostileWorkspaceSwap: the workspace's grandparent belongs to uid
// 65534, whose agent runs in the session. The agent itself cannot swap the
// workspace path (the host is read-only to it), but another process of
// that user outside the sandbox can, while the agent runs: the workspace
// path then leads, through symlinks, into a root-owned directory. Neither
// the automatic apply nor a later `apply` (with or without --force) may
// write there, or anywhere: the lower root changed.
func TestHostileWorkspaceSwap(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	home := filepath.Join(e.dir, "home")
	ws := filepath.Join(home, "work", "repo")
	victim := filepath.Join(e.dir, "victim")
	marks := filepath.Join(e.dir, "marks")
	write(t, ws, map[string]string{"a": "a\n"})
	write(t, victim, map[string]string{"keep": "root's\n"})
	if err := os.Mkdir(marks, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{home, filepath.Join(home, "work"), ws, filepath.Join(ws, "a"), marks} {
		if err := os.Lchown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	privtest.Searchable(t, e.dir)
	out := filepath.Join(e.dir, "run")
	script := `echo evil > ld.so.preload; echo b >> a; cd /
if mv "$H/work" "$H/work-old" 2>/dev/null; then echo "the agent moved its workspace's grandparent" >&2; exit 3; fi
touch "$M/ready"; while [ ! -e "$M/swapped" ]; do sleep 0.05; done`
	swapped := make(chan error, 1)
	go func() {
		for end := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(marks, "ready")); err == nil {
				break
			}
			if time.Now().After(end) {
				swapped <- errors.New("the agent never got ready")
				return
			}
		}
		// What the agent's user can do from outside the sandbox.
		swapped <- errors.Join(os.Rename(filepath.Join(home, "work"), filepath.Join(home, "work-old")),
			os.Mkdir(filepath.Join(home, "evil"), 0o755), os.Symlink(victim, filepath.Join(home, "evil", "repo")),
			os.Symlink(filepath.Join(home, "evil"), filepath.Join(home, "work")),
			os.WriteFile(filepath.Join(marks, "swapped"), nil, 0o644))
	}()
	code, log := e.runAt(ws, out, script, "--user", "65534:65534", "--env", "H="+home, "--env", "VICTIM="+victim,
		"--env", "M="+marks, "--rw", marks)
	if err := <-swapped; err != nil {
		t.Fatalf("swap: %v\n%s", err, log)
	}
	c := &applyCase{e: e, out: out, log: log}
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := c.statement(t)
	if !hasCode(st, attest.LowerChanged) {
		t.Errorf("no lower-changed reason: %+v", st.Incomplete)
	}
	check := func(when string) {
		t.Helper()
		ents, _ := os.ReadDir(victim)
		if len(ents) != 1 || readString(t, filepath.Join(victim, "keep")) != "root's\n" {
			t.Fatalf("%s: the root-owned directory was written: %v\n%s", when, ents, log)
		}
		old := filepath.Join(home, "work-old", "repo")
		if _, err := os.Lstat(filepath.Join(old, "ld.so.preload")); err == nil || readString(t, filepath.Join(old, "a")) != "a\n" {
			t.Fatalf("%s: the workspace was written though its path had moved", when)
		}
	}
	check("after run")
	if !strings.Contains(log, "nothing is applied") {
		t.Errorf("run does not say nothing is applied:\n%s", log)
	}
	for _, force := range []bool{false, true} {
		args := []string{"apply", "--state-dir", e.state, out}
		if force {
			args = []string{"apply", "--force", "--state-dir", e.state, out}
		}
		code, so, se := e.cli(args...)
		if code != exitFailed {
			t.Errorf("apply (force %v): exit %d, want %d\n%s%s", force, code, exitFailed, so, se)
		}
		check(fmt.Sprintf("after apply (force %v)", force))
	}
}

// TestHostileWorkspaceSwapAfterRun: a staged session whose workspace path
// leads elsewhere by the time of `apply` (a symlink into a root-owned
// directory) is refused without a write; once the path leads to the
// directory the session started on again, it applies.
func TestHostileWorkspaceSwapAfterRun(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a": "a\n"})
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `echo evil > ld.so.preload`, "--stage")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	victim := filepath.Join(e.dir, "victim")
	write(t, victim, map[string]string{"keep": "root's\n"})
	moved := e.ws + "-moved"
	if err := os.Rename(e.ws, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, e.ws); err != nil {
		t.Fatal(err)
	}
	if code, so, se := e.cli("apply", "--force", "--state-dir", e.state, out); code != exitFailed || !strings.Contains(se, "not the directory the session started on") {
		t.Errorf("apply through the swapped path: exit %d, want %d\n%s%s", code, exitFailed, so, se)
	}
	if _, err := os.Lstat(filepath.Join(victim, "ld.so.preload")); err == nil {
		t.Fatal("apply wrote through the swapped workspace path")
	}
	os.Remove(e.ws)
	if err := os.Rename(moved, e.ws); err != nil {
		t.Fatal(err)
	}
	// Moving the workspace away and back stamped its ctime: its root and
	// the new file there are conflicts now, which --force overwrites.
	if code, so, se := e.cli("apply", "--state-dir", e.state, out); code != exitFailed || !strings.Contains(se, "changed since the session started") {
		t.Errorf("apply after the move back: exit %d, want %d naming the conflicts\n%s%s", code, exitFailed, so, se)
	}
	if code, so, se := e.cli("apply", "--force", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("apply --force: exit %d\n%s%s", code, so, se)
	}
	if readString(t, filepath.Join(e.ws, "ld.so.preload")) != "evil\n" {
		t.Error("the change set was not applied once the workspace was back")
	}
}

// TestHostileTypeChangeCut: `rm -rf data && echo x > data` under an entry
// budget that lists only some of data's deletions. Nothing is applied
// automatically; `apply` removes only the listed deletions, leaves data
// (and the protected file in it that was never examined), and says so.
func TestHostileTypeChangeCut(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	tree := map[string]string{"layerseal.yaml": "protected: [data/zz-secret]\n", "data/zz-secret": "secret\n"}
	for i := range 49 {
		tree[fmt.Sprintf("data/f%02d", i)] = "f\n"
	}
	write(t, e.ws, tree)
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `rm -rf data && echo x > data`, "--max-entries", "40")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	c := &applyCase{e: e, out: out, log: log}
	st := c.statement(t)
	if !hasCode(st, attest.EntryBudget) {
		t.Fatalf("no entry-budget reason: %+v", st.Incomplete)
	}
	if fi, err := os.Lstat(filepath.Join(e.ws, "data")); err != nil || !fi.IsDir() || len(mustReadDir(t, filepath.Join(e.ws, "data"))) != 50 {
		t.Fatalf("the run applied part of an incompletely examined change set: %v\n%s", err, log)
	}
	if !strings.Contains(log, "nothing is applied automatically") {
		t.Errorf("run does not say why nothing was applied:\n%s", log)
	}
	code, so, se := e.cli("apply", "--state-dir", e.state, out)
	if code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, so, se)
	}
	if readString(t, filepath.Join(e.ws, "data", "zz-secret")) != "secret\n" {
		t.Error("apply removed data/zz-secret, which the statement does not list")
	}
	listed := 0
	for _, en := range st.Entries {
		if strings.HasPrefix(string(en.Path), "data/") {
			listed++
			if _, err := os.Lstat(filepath.Join(e.ws, string(en.Path))); err == nil {
				t.Errorf("listed deletion %s not applied", en.Path)
			}
		}
	}
	if got := len(mustReadDir(t, filepath.Join(e.ws, "data"))); got != 50-listed || listed == 0 {
		t.Errorf("data holds %d entries after apply; %d of 50 deletions were listed", got, listed)
	}
	if !strings.Contains(se, "left data") {
		t.Errorf("apply does not say it left data:\n%s", se)
	}
}

func mustReadDir(t *testing.T, p string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(p)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// TestHostileLinkBeyondCut: a new file and a link to it past the point
// where a budget or a limit stopped the walk (deploy/key replaced by a
// link to it). The link was not examined, so no apply may make it; the
// listed names of that inode share it with a protected name, so they are
// violations, reverted.
func TestHostileLinkBeyondCut(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		flags        []string
		code         attest.Code
		violations   string
	}{
		{"entry-budget", `echo EVIL > a; ln a b; for i in $(seq 100 199); do echo p > c$i; done; rm deploy/key; ln a deploy/key`,
			[]string{"--max-entries", "30"}, attest.EntryBudget, "a:deploy/**:reverted b:deploy/**:reverted"},
		// deploy's own mtime changed too: a violation, its metadata reverted.
		{"dir-entry-limit", `echo EVIL > a; ln a b; for i in $(seq 100 159); do ln a deploy/l$i; done; rm deploy/key; ln a deploy/key`,
			[]string{"--max-dir-entries", "50"}, attest.DirEntryLimit, "a:deploy/**:reverted b:deploy/**:reverted deploy:deploy/**:reverted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			privtest.Require(t)
			e := newEnv(t)
			write(t, e.ws, map[string]string{"layerseal.yaml": "protected: [deploy/**]\n", "deploy/key": "REAL\n"})
			out := filepath.Join(e.dir, "run")
			code, log := e.run(out, tc.script, tc.flags...)
			if code != 0 {
				t.Fatalf("run: exit %d\n%s", code, log)
			}
			st := (&applyCase{e: e, out: out, log: log}).statement(t)
			if !hasCode(st, tc.code) {
				t.Fatalf("no %s reason: %+v", tc.code, st.Incomplete)
			}
			if _, err := os.Lstat(filepath.Join(e.ws, "a")); err == nil {
				t.Fatalf("the run applied an incompletely examined change set\n%s", log)
			}
			if code, so, se := e.cli("apply", "--state-dir", e.state, out); code != 0 {
				t.Fatalf("apply: exit %d\n%s%s", code, so, se)
			}
			if got := readString(t, filepath.Join(e.ws, "deploy", "key")); got != "REAL\n" {
				t.Errorf("deploy/key is %q after apply: a link nobody examined was made", got)
			}
			var vs []string
			for _, v := range st.Violations {
				vs = append(vs, fmt.Sprintf("%s:%s:%s", v.Path, v.Rule, v.Action))
			}
			if got := strings.Join(vs, " "); got != tc.violations {
				t.Errorf("violations %s", got)
			}
			for _, p := range []string{"a", "b"} {
				if _, err := os.Lstat(filepath.Join(e.ws, p)); err == nil {
					t.Errorf("%s, a name of deploy/key's new inode, was applied", p)
				}
			}
		})
	}
}

// runAt runs script as the agent over the workspace ws (not e.ws).
func (e *env) runAt(ws, out, script string, extra ...string) (int, string) {
	e.t.Helper()
	args := append([]string{"run", "--workspace", ws, "--key", e.key, "--out", out, "--state-dir", e.state}, extra...)
	args = append(args, "--", "/bin/sh", "-ec", script)
	code, stdout, stderr := e.cli(args...)
	return code, stdout + stderr
}

// sameInode reports whether the workspace paths are one inode.
func sameInode(t *testing.T, ws string, ps ...string) bool {
	t.Helper()
	var first unix.Stat_t
	for i, p := range ps {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, p), &st); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if i == 0 {
			first = st
		} else if st.Dev != first.Dev || st.Ino != first.Ino {
			return false
		}
	}
	return true
}

// TestHostileAliasProtected: new names hard-linked to a protected file
// (directly, or through an unprotected lower link of it) are violations
// of its rule and are reverted; a new link to an unprotected file with
// other workspace links keeps them all one inode (apply does not split
// the file it links to from its unlisted links).
func TestHostileAliasProtected(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"layerseal.yaml": "protected: [.env, deploy/**]\n", ".env": "SECRET\n", "deploy/key": "KEY\n", "notes": "n\n"})
	for _, l := range [][2]string{{".env", "env.bak"}, {"notes", "notes.bak"}} {
		if err := os.Link(filepath.Join(e.ws, l[0]), filepath.Join(e.ws, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `ln deploy/key stolen-key; ln .env env-alias; ln env.bak via-bak; ln notes notes-new`)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := (&applyCase{e: e, out: out, log: log}).statement(t)
	want := map[attest.Path]string{"stolen-key": "deploy/**", "env-alias": ".env", "via-bak": ".env"}
	got := map[attest.Path]string{}
	for _, v := range st.Violations {
		got[v.Path] = v.Rule
		if v.Action != attest.Reverted {
			t.Errorf("violation %s: %s", v.Path, v.Action)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("violations %v, want %v\n%s", got, want, log)
	}
	// A run with violations is staged; the user applies what the sweep left.
	if code, so, se := e.cli("apply", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, so, se)
	}
	for p := range want {
		if _, err := os.Lstat(filepath.Join(e.ws, string(p))); err == nil {
			t.Errorf("%s was applied: it aliases a protected file", p)
		}
	}
	if !sameInode(t, e.ws, ".env", "env.bak") {
		t.Error(".env was split from env.bak")
	}
	if !sameInode(t, e.ws, "notes", "notes.bak", "notes-new") {
		t.Error("notes, notes.bak and notes-new are not one inode: apply split an unlisted link")
	}
}

// TestHostileTimeOutOfRange: times int64 nanoseconds cannot hold (a file
// touched to the year 2400, a lower file of that age the agent appends
// to) are never signed: those entries are left out with an unreadable
// reason, nothing is applied automatically, and `apply` writes the rest
// and not them (no wrapped-around time reaches the workspace).
func TestHostileTimeOutOfRange(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"old": "o\n"})
	future := unix.Timespec{Sec: 13569465600} // 2400-01-01
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(e.ws, "old"), []unix.Timespec{future, future}, 0); err != nil {
		t.Fatal(err)
	}
	var st0 unix.Stat_t
	if err := unix.Stat(filepath.Join(e.ws, "old"), &st0); err != nil || st0.Mtim.Sec != future.Sec {
		t.Fatalf("the test filesystem cannot hold the year 2400 (%v, %d)", err, st0.Mtim.Sec)
	}
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `touch -d 2400-01-01 f; echo more >> old; touch -d 2400-01-01 old; echo g > g`)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := (&applyCase{e: e, out: out, log: log}).statement(t)
	for _, en := range st.Entries {
		if en.Path == "f" || en.Path == "old" {
			t.Errorf("%s is listed (mtime %d)", en.Path, en.New.MtimeNS)
		}
	}
	bad := map[attest.Path]bool{}
	for _, r := range st.Incomplete {
		if r.Code == attest.Unreadable {
			bad[r.Path] = true
		}
	}
	if !bad["f"] || !bad["old"] {
		t.Errorf("no unreadable reason for f and old: %+v", st.Incomplete)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "g")); err == nil {
		t.Fatal("applied automatically")
	}
	if code, so, se := e.cli("apply", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, so, se)
	}
	if readString(t, filepath.Join(e.ws, "g")) != "g\n" || readString(t, filepath.Join(e.ws, "old")) != "o\n" {
		t.Error("apply did not apply g alone")
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "f")); err == nil {
		t.Error("f was applied")
	}
}

// TestHostileOverlayNamedXattrs: user.overlay.* attributes are user data
// to a privileged overlay: set on one run (one on a file that is then
// hard-linked), removed and linked again on the next, each applied
// exactly; verify --workspace agrees after both runs, and the unlisted
// names keep their attributes and links.
func TestHostileOverlayNamedXattrs(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a": "a\n", "b": "b\n"})
	for i, script := range []string{
		`setfattr -n user.overlay.foo -v 1 a; setfattr -n user.overlay.redirect -v /x b; ln b b2`,
		`setfattr -x user.overlay.foo a; ln b b3`,
	} {
		out := filepath.Join(e.dir, fmt.Sprintf("run%d", i))
		code, log := e.run(out, script)
		if code != 0 {
			t.Fatalf("run %d: exit %d\n%s", i, code, log)
		}
		st := filepath.Join(out, "statement.json")
		if code, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, st); code != 0 {
			t.Errorf("run %d: verify --workspace: exit %d\n%s%s", i, code, so, se)
		}
	}
	get := func(p, name string) string {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(e.ws, p), name, buf)
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(buf[:n])
	}
	if v := get("a", "user.overlay.foo"); !strings.HasPrefix(v, "<") {
		t.Errorf("a keeps user.overlay.foo=%q, removed by the second run", v)
	}
	for _, p := range []string{"b", "b2", "b3"} {
		if v := get(p, "user.overlay.redirect"); v != "/x" {
			t.Errorf("%s: user.overlay.redirect=%q, want \"/x\"", p, v)
		}
	}
	if !sameInode(t, e.ws, "b", "b2", "b3") {
		t.Error("b, b2 and b3 are not one inode")
	}
}

// TestHostileExcludedDangerous: inside an excluded subtree, a setuid
// copy of a shell, a setgid bit added to a lower file, a 0666 block
// device, a hard link to a protected file and symlinks leaving the
// subtree are itemized, not just counted (all but the symlinks are
// violations and are reverted); the rest is counted.
func TestHostileExcludedDangerous(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"layerseal.yaml": "exclude: [node_modules]\nprotected: [.env]\n", ".env": "SECRET\n",
		"node_modules/pkg/tool": "t\n", "src/a": "a\n"})
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `cd node_modules/pkg; cp /bin/sh sh; chmod 4755 sh; chmod 2755 tool; mknod blk b 8 0; chmod 666 blk
ln ../../.env env; ln -s /etc/shadow shadow; ln -s ../../src up; ln -s ./sh in; echo x > plain`,
		"--process", e.rootWith("CAP_MKNOD")) // the device node needs CAP_MKNOD, no longer a default
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := (&applyCase{e: e, out: out, log: log}).statement(t)
	got := map[string]attest.Change{}
	for _, en := range st.Entries {
		got[string(en.Path)] = en.Change
	}
	want := map[string]attest.Change{"node_modules/pkg/sh": attest.Added, "node_modules/pkg/tool": attest.Metadata,
		"node_modules/pkg/blk": attest.Added, "node_modules/pkg/env": attest.Added, "node_modules/pkg/shadow": attest.Added,
		"node_modules/pkg/up": attest.Added}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	if len(st.Excluded) != 1 || st.Excluded[0].Entries != 4 { // node_modules, pkg, in, plain
		t.Errorf("excluded %+v, want node_modules with 4 entries", st.Excluded)
	}
	vs := map[string]string{}
	for _, v := range st.Violations {
		vs[string(v.Path)] = v.Rule + " " + string(v.Action)
	}
	if want := map[string]string{"node_modules/pkg/env": ".env reverted", "node_modules/pkg/sh": policy.RuleSetuid + " reverted",
		"node_modules/pkg/tool": policy.RuleSetgid + " reverted", "node_modules/pkg/blk": policy.RuleDevice + " reverted"}; fmt.Sprint(vs) != fmt.Sprint(want) {
		t.Errorf("violations %v, want %v", vs, want)
	}
	// A run with violations is staged; the user applies what the sweep left.
	if code, so, se := e.cli("apply", "--state-dir", e.state, out); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, so, se)
	}
	for _, p := range []string{"env", "sh", "blk"} {
		if _, err := os.Lstat(filepath.Join(e.ws, "node_modules/pkg", p)); err == nil {
			t.Errorf("node_modules/pkg/%s was applied", p)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.ws, "node_modules/pkg/tool")); err != nil || fi.Mode()&os.ModeSetgid != 0 {
		t.Errorf("node_modules/pkg/tool: %v, %v: want it without its setgid bit", fi, err)
	}
	if readString(t, filepath.Join(e.ws, "node_modules/pkg/plain")) != "x\n" {
		t.Error("the excluded subtree was not applied")
	}
	if code, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, filepath.Join(out, "statement.json")); code != 0 {
		t.Errorf("verify --workspace: exit %d\n%s%s", code, so, se)
	}
}
