package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/treediff"
)

// gitIn runs git in dir and fails the test when it fails.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, stderr.String())
	}
	return out.String()
}

// gitTree is what git keeps of a tree outside .git: each regular file's
// bytes and executable bit, each symlink's target.
func gitTree(t *testing.T, root string) map[string]string {
	t.Helper()
	m := make(map[string]string)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" {
			return filepath.SkipDir
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			m[rel] = "link:" + target
			return err
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			info, _ := d.Info()
			m[rel] = "file:" + info.Mode().Perm().String()[3:4] + ":" + string(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDiffPatchRoundTrip: `diff --patch` of a staged session is taken by
// `git apply --check` against the unchanged workspace, and `git apply`
// of it in a copy makes what `layerseal apply` makes of the text files
// and symlinks; names with a newline, invalid UTF-8, a space and a
// leading dash come through git's quoting; a FIFO is named on stderr as
// what a patch cannot hold; PATHs limit the patch and one that is not in
// the change set is an error naming it; --stat ends in git's summary
// line; show and diff fold a directory added whole unless --all, and
// show a rename as one.
func TestDiffPatchRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": strings.Repeat("line\n", 30), "del.txt": "d\n", "moved.txt": "to be moved\n", "run.sh": "#!/bin/sh\n", "dir/x": "x\n"})
	if err := os.Symlink("a.txt", filepath.Join(e.ws, "link")); err != nil {
		t.Fatal(err)
	}
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "add", "-A")
	gitIn(t, e.ws, "commit", "-qm", "base")
	out, _ := e.stagedRun("s", `sed -i '3s/.*/changed/' a.txt; echo end >> a.txt
rm del.txt; mv moved.txt moved2.txt; chmod +x run.sh; rm link; ln -s dir/x link
printf 'nl\n' > "$(printf 'new\nline')"; printf 'bad\n' > "$(printf 'bad\377')"; printf 'dash\n' > -dash; printf 'sp\n' > 'sp ace'
mkdir -p pkg/lib; for i in 1 2 3; do echo $i > pkg/lib/f$i; done; rm -r dir; mkfifo fifo`)

	code, patch, stderr := e.cli("diff", "--state-dir", e.state, "--patch", out)
	if code != 0 {
		t.Fatalf("diff --patch: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "fifo is a FIFO: a git patch holds only files and symlinks") {
		t.Errorf("diff --patch does not name the FIFO it leaves out:\n%s", stderr)
	}
	for _, want := range []string{"diff --git \"a/new\\nline\" \"b/new\\nline\"\n", "diff --git \"a/bad\\377\" \"b/bad\\377\"\n", "diff --git a/-dash b/-dash\n",
		"+++ b/sp ace\t\n", "rename from moved.txt\nrename to moved2.txt\n", "old mode 100644\nnew mode 100755\n"} {
		if !strings.Contains(patch, want) {
			t.Errorf("patch lacks %q:\n%s", want, patch)
		}
	}
	pf := filepath.Join(e.dir, "s.patch")
	if err := os.WriteFile(pf, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.Join(e.dir, "copy")
	if b, err := exec.Command("cp", "-a", e.ws, copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, b)
	}
	gitIn(t, e.ws, "apply", "--check", pf)
	gitIn(t, copyDir, "apply", pf)

	if code, paths, stderr := e.cli("diff", "--state-dir", e.state, "--patch", out, "a.txt", "pkg"); code != 0 || strings.Count(paths, "diff --git") != 4 {
		t.Errorf("diff --patch OUT a.txt pkg: exit %d, %d files:\n%s%s", code, strings.Count(paths, "diff --git"), paths, stderr)
	}
	if msg := e.mustCLI(1, "diff", "--state-dir", e.state, "--patch", out, "nonesuch"); !strings.Contains(msg, `path "nonesuch" is not in the change set`) {
		t.Errorf("diff --patch of a path not in the change set: %s", msg)
	}
	if stat := e.mustCLI(0, "diff", "--state-dir", e.state, "--stat", out); !strings.Contains(stat, " moved.txt => moved2.txt | 0\n") || !strings.Contains(stat, " 13 files changed, 10 insertions(+), 4 deletions(-)\n") {
		t.Errorf("diff --stat:\n%s", stat)
	}
	list := e.mustCLI(0, "diff", "--state-dir", e.state, out)
	for _, want := range []string{"A  pkg/  (4 entries beneath; --all lists them)\n", "R  moved.txt -> moved2.txt\n", "D  dir/  (1 entry beneath; --all lists them)\n"} {
		if !strings.Contains(list, want) {
			t.Errorf("diff lacks %q:\n%s", want, list)
		}
	}
	if c := e.mustCLI(0, "diff", "--state-dir", e.state, "--color=always", out); !strings.Contains(c, "\x1b[32mA\x1b[m  pkg/") {
		t.Errorf("diff --color=always:\n%q", c)
	}
	if _, c, _ := e.cliEnv([]string{"NO_COLOR=1"}, "diff", "--state-dir", e.state, "--patch", out); strings.Contains(c, "\x1b") {
		t.Errorf("diff --patch under NO_COLOR is coloured:\n%q", c)
	}
	if all := e.mustCLI(0, "diff", "--state-dir", e.state, "--all", out); !strings.Contains(all, "A  pkg/lib/f3\n") {
		t.Errorf("diff --all does not list pkg/lib/f3:\n%s", all)
	}

	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	got, want := gitTree(t, copyDir), gitTree(t, e.ws)
	delete(want, "fifo")
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%q: git apply of the patch made %q, layerseal apply %q", p, got[p], w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%q: git apply of the patch left it, layerseal apply did not", p)
		}
	}
}

// TestApplyPart: apply --only and --except apply part of a staged change
// set and keep the rest staged (directories the part needs come along);
// discard --only drops part; diff, show and sessions say what is
// applied, discarded and still staged; a glob matching nothing, a path
// inside a replaced directory without it, and one name of a hard-linked
// file without the other are refused with nothing applied; an apply of a
// part killed at any step finishes when run again and leaves the rest
// staged.
func TestApplyPart(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"src/a": "a\n", "docs/b": "b\n", "README": "r\n", "rdir/old": "o\n", "x": "x\n"})
	script := `echo a2 > src/a; mkdir -p src/new/deep; echo n > src/new/deep/n; echo b2 > docs/b; rm README
mkdir -p pkg; echo p > pkg/p; rm -r rdir; mkdir rdir; echo z > rdir/z; echo x2 > x; ln x y`
	out, view := e.stagedRun("s", script)
	before := e.manifest()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--only", "src/new/**", "--only", "nomatch/*"}, `--only "nomatch/*" matches no change still staged`},
		{[]string{"--except", "nomatch"}, `--except "nomatch" matches no change still staged`},
		{[]string{"--only", "rdir/z"}, `"rdir/z" lies inside "rdir", which the agent replaced`},
		{[]string{"--only", "x"}, `"y" and "x" are names of one file (hard links): choose both or neither`},
	} {
		msg := e.mustCLI(1, append(append([]string{"apply", "--state-dir", e.state}, c.args...), out)...)
		if !strings.Contains(msg, c.want) {
			t.Errorf("apply %v: %s\nwant %q", c.args, msg, c.want)
		}
		if d := treediff.Equal(before, e.manifest()); d != "" {
			t.Fatalf("a refused apply %v changed the workspace: %s", c.args, d)
		}
	}
	if msg := e.mustCLI(64, "apply", "--state-dir", e.state, "--only", "a", "--except", "b", out); !strings.Contains(msg, "one of --only and --except") {
		t.Errorf("--only with --except: %s", msg)
	}

	// A part killed at a step in its middle finishes when run again.
	steps := filepath.Join(e.dir, "steps")
	part := []string{"apply", "--state-dir", e.state, "--only", "src/new/deep/*", out}
	if code, _, stderr := e.cliEnv([]string{fmt.Sprintf("%s=%d", killAtEnv, 4), stepsFileEnv + "=" + steps}, part...); code != -1 {
		t.Fatalf("apply killed at step 4: exit %d\n%s", code, stderr)
	}
	if msg := e.mustCLI(0, part...); !strings.Contains(msg, "partly settled: 3 change(s) applied, 0 discarded") {
		t.Errorf("the resumed part: %s", msg)
	}
	now := e.manifest()
	for _, p := range []string{"src/new", "src/new/deep", "src/new/deep/n"} {
		if !reflect.DeepEqual(now[p], view[p]) {
			t.Errorf("%s after the part: %+v, want the agent's %+v", p, now[p], view[p])
		}
	}
	for _, p := range []string{"src/a", "docs/b", "README", "pkg"} {
		if !reflect.DeepEqual(now[p], before[p]) {
			t.Errorf("%s changed by a part that did not choose it", p)
		}
	}
	list := e.mustCLI(0, "diff", "--state-dir", e.state, out)
	if strings.Contains(list, "src/new") || !strings.Contains(list, "M  src/a\n") {
		t.Errorf("diff after a part:\n%s", list)
	}

	if msg := e.mustCLI(0, "discard", "--state-dir", e.state, "--only", "docs/b", out); !strings.Contains(msg, "discarded 1 change(s); partly settled: 3 change(s) applied, 1 discarded") {
		t.Errorf("discard --only: %s", msg)
	}
	if msg := e.mustCLI(0, "sessions", "--state-dir", e.state); !strings.Contains(msg, "partly settled: 3 change(s) applied, 1 discarded") {
		t.Errorf("sessions after parts:\n%s", msg)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, "--except", "pkg", out)
	if list := e.mustCLI(0, "diff", "--state-dir", e.state, "--all", out); !strings.Contains(list, "A  pkg/p\n") || strings.Contains(list, "src/a") {
		t.Errorf("diff after --except pkg:\n%s", list)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, out); !strings.Contains(msg, "already applied") {
		t.Errorf("apply after the last part: %s", msg)
	}
	want := view
	want["docs/b"] = before["docs/b"] // discarded
	if d := treediff.Equal(want, e.manifest()); d != "" {
		t.Errorf("after every part: %s", d)
	}
	if msg := e.mustCLI(0, "show", "--state-dir", e.state, filepath.Join(out, "statement.json")); !strings.Contains(msg, "settled: 14 change(s) applied, 1 discarded") {
		t.Errorf("show after every part:\n%s", msg)
	}
}

// repoState is what apply --git-branch must leave alone: the refs, HEAD,
// the index file's bytes and git status.
func repoState(t *testing.T, dir string) string {
	t.Helper()
	index, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	return gitIn(t, dir, "for-each-ref") + gitIn(t, dir, "rev-parse", "HEAD") + gitIn(t, dir, "symbolic-ref", "-q", "HEAD") +
		gitIn(t, dir, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all") + fmt.Sprintf("%x", index)
}

// TestApplyGitBranch: apply --git-branch writes the change set as one
// commit on a new branch whose parent is HEAD at launch, with the
// session's trailers, leaving the working tree, the index and the
// checked-out branch alone; .git changes, ignored paths and a FIFO are
// left out and listed, and the change set stays staged; an existing branch, a second --git-branch, a
// workspace that is no repository, a detached HEAD that moved and a
// dirty index are refused with nothing written.
// TestApplyGitBranchAsOwner: in a repository of another user, git runs
// as that user (as root it would refuse the repository, and would leave
// root-owned objects in it): the branch is made, under the owner's
// identity, and nothing in .git belongs to root.
func TestApplyGitBranchAsOwner(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	const owner = 65534          // nobody
	privtest.Searchable(t, e.ws) // the owner reaches the repository
	write(t, e.ws, map[string]string{"a": "a\n"})
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "config", "user.name", "Owner")
	gitIn(t, e.ws, "config", "user.email", "owner@example.com")
	gitIn(t, e.ws, "add", "-A")
	gitIn(t, e.ws, "commit", "-qm", "base")
	chownTree := func(uid int) {
		t.Helper()
		err := filepath.WalkDir(e.ws, func(p string, _ fs.DirEntry, err error) error {
			if err == nil {
				err = os.Lchown(p, uid, uid)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	chownTree(owner)
	defer chownTree(0) // for the temporary dir's removal
	out, _ := e.stagedRun("s", "echo b > a; echo c > c")
	if code, _, stderr := e.cli("apply", "--state-dir", e.state, "--git-branch", "agent", out); code != 0 {
		t.Fatalf("apply --git-branch in a repository of uid %d: exit %d\n%s", owner, code, stderr)
	}
	if got := gitIn(t, e.ws, "log", "-1", "--format=%an <%ae>", "agent"); got != "Owner <owner@example.com>\n" {
		t.Errorf("the commit's author is %q, want the repository's identity", got)
	}
	if got := gitIn(t, e.ws, "ls-tree", "-r", "--name-only", "agent"); got != "a\nc\n" {
		t.Errorf("the commit holds:\n%s", got)
	}
	filepath.WalkDir(filepath.Join(e.ws, ".git"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := d.Info(); err == nil && fi.Sys().(*syscall.Stat_t).Uid != owner {
			t.Errorf("%s belongs to uid %d, not to the repository's owner", p, fi.Sys().(*syscall.Stat_t).Uid)
		}
		return nil
	})
}

func TestApplyGitBranch(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	write(t, e.ws, map[string]string{"src/a.go": "a\n", "README": "r\n", ".gitignore": "build/\n"})
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "config", "user.name", "t")
	gitIn(t, e.ws, "config", "user.email", "t@t")
	gitIn(t, e.ws, "add", "-A")
	gitIn(t, e.ws, "commit", "-qm", "base")
	parent := gitIn(t, e.ws, "rev-parse", "HEAD")
	out, _ := e.stagedRun("s", `echo a2 > src/a.go; rm README; printf 'nl\n' > "$(printf 'new\nline')"; mkdir build; echo o > build/o
echo note > .git/agent-note; mkfifo fifo; ln -s src/a.go link; echo '*.tmp' >> .gitignore; echo t > x.tmp`)
	// Someone commits on the checked-out branch meanwhile: the new
	// branch still starts at HEAD as it was at launch.
	write(t, e.ws, map[string]string{"later": "l\n"})
	gitIn(t, e.ws, "add", "later")
	gitIn(t, e.ws, "commit", "-qm", "later")
	write(t, e.ws, map[string]string{"staged": "s\n"})
	gitIn(t, e.ws, "add", "staged")
	dirty := repoState(t, e.ws)
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, "--git-branch", "agent", out); !strings.Contains(msg, "index holds staged changes") {
		t.Errorf("a dirty index: %s", msg)
	}
	if after := repoState(t, e.ws); after != dirty {
		t.Fatalf("a refused --git-branch changed the repository:\n%s\n---\n%s", dirty, after)
	}
	gitIn(t, e.ws, "rm", "-q", "--cached", "staged")
	os.Remove(filepath.Join(e.ws, "staged"))
	before := repoState(t, e.ws)
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, "--git-branch", "main", out); !strings.Contains(msg, `branch "main" exists: nothing was written to the repository`) {
		t.Errorf("an existing branch: %s", msg)
	}
	if after := repoState(t, e.ws); after != before {
		t.Fatalf("a refused --git-branch changed the repository:\n%s\n---\n%s", before, after)
	}

	code, stdout, stderr := e.cli("apply", "--state-dir", e.state, "--git-branch", "agent", out)
	if code != 0 {
		t.Fatalf("apply --git-branch: exit %d\n%s", code, stderr)
	}
	commit := strings.TrimSpace(stdout)
	if got := gitIn(t, e.ws, "rev-parse", commit+"^"); got != parent {
		t.Errorf("the commit's parent is %s, want HEAD at launch %s", got, parent)
	}
	msg := gitIn(t, e.ws, "log", "-1", "--format=%B", "agent")
	for _, want := range []string{"Layerseal-Session: ", "Layerseal-Statement: sha256:"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the commit message lacks %q:\n%s", want, msg)
		}
	}
	if got := gitIn(t, e.ws, "ls-tree", "-r", "--name-only", "agent"); got != ".gitignore\nlink\n\"new\\nline\"\nsrc/a.go\n" {
		t.Errorf("the commit holds:\n%s", got)
	}
	if got := gitIn(t, e.ws, "show", "agent:src/a.go"); got != "a2\n" {
		t.Errorf("src/a.go on the branch: %q", got)
	}
	for _, want := range []string{"not in the commit: 2 change(s) inside .git (never committed", "not in the commit: build/o (ignored by git)", "not in the commit: x.tmp (ignored by git)", "not in the commit: build (holds changes left staged)", "not in the commit: fifo (not a file git holds"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("apply --git-branch does not say %q:\n%s", want, stderr)
		}
	}
	if after := repoState(t, e.ws); strings.Replace(after, gitIn(t, e.ws, "for-each-ref", "refs/heads/agent"), "", 1) != before {
		t.Errorf("--git-branch changed more than the new branch:\n%s\n---\n%s", before, after)
	}
	if msg := e.mustCLI(1, "apply", "--state-dir", e.state, "--git-branch", "again", out); !strings.Contains(msg, "was written to git branch agent (commit "+commit+") already") {
		t.Errorf("a second --git-branch: %s", msg)
	}
	// The whole change set stays staged.
	if list := e.mustCLI(0, "diff", "--state-dir", e.state, out); !strings.Contains(list, "A  .git/agent-note\n") || !strings.Contains(list, "A  x.tmp\n") || !strings.Contains(list, "M  src/a.go") {
		t.Errorf("diff after --git-branch:\n%s", list)
	}

	// Not a repository; a detached HEAD that moved.
	plain := newEnv(t)
	write(t, plain.ws, map[string]string{"f": "f\n"})
	pout, _ := plain.stagedRun("p", "echo g > f")
	if msg := plain.mustCLI(1, "apply", "--state-dir", plain.state, "--git-branch", "agent", pout); !strings.Contains(msg, "is not a git repository: nothing was written") {
		t.Errorf("not a repository: %s", msg)
	}
	d := newEnv(t)
	write(t, d.ws, map[string]string{"f": "f\n"})
	gitIn(t, d.ws, "init", "-q")
	gitIn(t, d.ws, "add", "-A")
	gitIn(t, d.ws, "commit", "-qm", "base")
	gitIn(t, d.ws, "checkout", "-q", "--detach")
	dout, _ := d.stagedRun("d", "echo g > f")
	gitIn(t, d.ws, "commit", "-q", "--allow-empty", "-m", "moved")
	if msg := d.mustCLI(1, "apply", "--state-dir", d.state, "--git-branch", "agent", dout); !strings.Contains(msg, "HEAD is detached and moved since the launch") {
		t.Errorf("a detached HEAD that moved: %s", msg)
	}
}

// TestDiffOfApplied: `diff` and `diff --patch` of an applied session say
// where the changes can still be seen: the statement, and in a git
// workspace the git diff against the commit HEAD was at when it launched,
// which shows them.
func TestDiffOfApplied(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.txt": "a\n"})
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "add", "a.txt")
	gitIn(t, e.ws, "commit", "-qm", "launch")
	commit := strings.TrimSpace(gitIn(t, e.ws, "rev-parse", "HEAD"))
	out := filepath.Join(e.dir, "run")
	if code, log := e.run(out, "echo agent > a.txt"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	for _, args := range [][]string{{"diff"}, {"diff", "--patch"}} {
		msg := e.mustCLI(1, append(args, "--state-dir", e.state, out)...)
		if !strings.Contains(msg, "already applied") || !strings.Contains(msg, "layerseal show "+filepath.Join(out, "statement.json")) ||
			!strings.Contains(msg, "`git diff "+commit+"`") {
			t.Errorf("%v of an applied session:\n%s", args, msg)
		}
	}
	if d := gitIn(t, e.ws, "diff", commit); !strings.Contains(d, "+agent") {
		t.Errorf("git diff %s does not show the agent's edit:\n%s", commit, d)
	}
}
