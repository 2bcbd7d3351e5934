package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/policy"
)

// gitStatus runs `git status` in dir as an operator would (no config but
// the repository's, discovery stopped at the test's directory), and
// ignores how it ends: what matters is what it runs.
func (e *env) gitStatus(dir string) {
	e.t.Helper()
	cmd := exec.Command("git", "status")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+e.dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CEILING_DIRECTORIES="+e.dir)
	cmd.Run()
}

// TestGitRepositoryRule: issue 25's cases 1, 2 (the nested repository)
// and 4 outside the workspace's own .git. One run makes src/ a repository
// by git's bare layout with core.fsmonitor, a new repository in sub/, a
// hook in an existing bare repository, an exec line in an existing nested
// repository's rebase-merge todo, and two repositories in the excluded
// node_modules (one by .git, one by layout), beside an npm-like package:
// each is a violation of (git repository), reverted, and after apply git
// status runs none of the fsmonitor commands; the rest is applied.
func TestGitRepositoryRule(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	marker := func(n int) string { return filepath.Join(e.dir, fmt.Sprintf("owned%d", n)) }
	fsmonitor := func(n int) string { return fmt.Sprintf("git config core.fsmonitor 'touch %s; true'", marker(n)) }

	// The attack works with this git: src/ made a repository runs its
	// fsmonitor command on git status.
	control := filepath.Join(e.dir, "control")
	write(t, control, map[string]string{"main.go": "package main\n"})
	gitIn(t, control, "init", "-q", "--bare", ".")
	gitIn(t, control, "config", "core.bare", "false")
	gitIn(t, control, "config", "core.worktree", control)
	gitIn(t, control, "config", "core.fsmonitor", "touch "+marker(0)+"; true")
	e.gitStatus(control)
	if _, err := os.Lstat(marker(0)); err != nil {
		t.Fatalf("the attack does not work with this git (%v): the test would mean nothing", err)
	}

	baseRepository(t, e)
	write(t, e.ws, map[string]string{"lib/a.txt": "a\n"})
	gitIn(t, filepath.Join(e.ws, "lib"), "init", "-q")
	gitIn(t, filepath.Join(e.ws, "lib"), "add", "-A")
	gitIn(t, filepath.Join(e.ws, "lib"), "commit", "-qm", "lib")
	gitIn(t, e.ws, "init", "-q", "--bare", "vendor/lib.git")
	before := e.manifest()

	script := `export HOME=/tmp
cd src; git init -q --bare .; git config core.bare false; git config core.worktree "$PWD"; ` + fsmonitor(1) + `; cd ..
mkdir sub; cd sub; git init -q; ` + fsmonitor(2) + `; cd ..
mkdir -p vendor/lib.git/hooks # git without its templates makes none
printf '#!/bin/sh\ntouch ` + marker(3) + `\n' > vendor/lib.git/hooks/pre-commit; chmod +x vendor/lib.git/hooks/pre-commit
mkdir lib/.git/rebase-merge; printf 'exec touch ` + marker(4) + `\n' > lib/.git/rebase-merge/git-rebase-todo
mkdir -p node_modules/evil; cd node_modules/evil; git init -q; ` + fsmonitor(5) + `; cd ../..
mkdir -p node_modules/bare; cd node_modules/bare; git init -q --bare .; git config core.bare false; git config core.worktree "$PWD"; ` + fsmonitor(6) + `; cd ../..
mkdir -p node_modules/pkg/objects node_modules/pkg/refs node_modules/pkg/lib/hooks
echo '{}' > node_modules/pkg/package.json; echo c > node_modules/pkg/config; echo i > node_modules/pkg/index; echo h > node_modules/pkg/lib/hooks/use.js
echo changed > README.md`
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, script)
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged for its violations:\n%s", code, log)
	}
	for _, p := range []string{"src/HEAD", "src/config", "src/objects", "src/refs", "sub/.git",
		"vendor/lib.git/hooks/pre-commit", "lib/.git/rebase-merge", "lib/.git/rebase-merge/git-rebase-todo",
		"node_modules/evil/.git", "node_modules/bare/HEAD", "node_modules/bare/config", "node_modules/bare/objects"} {
		if want := fmt.Sprintf("protected path %s changed (rule %q): reverted", p, policy.RuleGitRepository); !strings.Contains(log, want) {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	if strings.Contains(log, "path node_modules/pkg") || strings.Contains(log, "path src/main.go") || strings.Contains(log, "path README.md") {
		t.Errorf("ordinary files taken for a repository's:\n%s", log)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	for _, d := range []string{"src", "sub", "lib", "vendor/lib.git", "node_modules/evil", "node_modules/bare", "."} {
		e.gitStatus(filepath.Join(e.ws, d))
	}
	for n := 1; n <= 6; n++ {
		if _, err := os.Lstat(marker(n)); err == nil {
			t.Errorf("git ran the agent's command %d after apply", n)
		}
	}
	after := e.manifest()
	for _, p := range []string{"src/HEAD", "src/config", "src/objects", "src/refs", "sub/.git", "vendor/lib.git/hooks/pre-commit",
		"lib/.git/rebase-merge", "node_modules/evil/.git", "node_modules/bare/HEAD", "node_modules/bare/config"} {
		if _, ok := after[p]; ok {
			t.Errorf("%s was applied", p)
		}
	}
	for _, p := range []string{"src/main.go", "lib/.git/HEAD", "lib/.git/config", "vendor/lib.git/config", "vendor/lib.git/HEAD"} {
		if d := treediff.Equal(treediff.Manifest{p: before[p]}, treediff.Manifest{p: after[p]}); d != "" {
			t.Errorf("%s changed: %s", p, d)
		}
	}
	for _, p := range []string{"node_modules/pkg/config", "node_modules/pkg/index", "node_modules/pkg/lib/hooks/use.js", "sub", "node_modules/evil"} {
		if _, ok := after[p]; !ok {
			t.Errorf("%s was not applied", p)
		}
	}
	if readString(t, filepath.Join(e.ws, "README.md")) != "changed\n" {
		t.Error("README.md was not applied")
	}
}

// TestGitRepositoryOrdinary: an agent's ordinary git work in the
// workspace's repository (add, commit, checkout -b, stash), an npm-like
// tree in an excluded node_modules and an edited README.md break no rule:
// the run is applied.
func TestGitRepositoryOrdinary(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	baseRepository(t, e)
	script := `export HOME=/tmp GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@a GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@a
echo more >> README.md; git add README.md; git commit -qm more
git checkout -qb feature
echo wip >> src/main.go; git stash -q
for p in a b c; do
	mkdir -p node_modules/$p/lib/hooks node_modules/$p/objects node_modules/$p/refs
	echo '{}' > node_modules/$p/package.json; echo c > node_modules/$p/config; echo i > node_modules/$p/index
	echo x > node_modules/$p/objects/o.js; echo y > node_modules/$p/refs/r.js; echo h > node_modules/$p/lib/hooks/use.js
done
echo edited >> README.md`
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, script)
	if code != 0 || strings.Contains(log, "protected") || strings.Contains(log, "staged") {
		t.Fatalf("run: exit %d, want applied with no violation:\n%s", code, log)
	}
	if got := readString(t, filepath.Join(e.ws, "README.md")); got != "hello\nmore\nedited\n" {
		t.Errorf("README.md = %q: not applied", got)
	}
	if got := strings.TrimSpace(gitIn(t, e.ws, "rev-parse", "--abbrev-ref", "HEAD")); got != "feature" {
		t.Errorf("branch %q, want feature", got)
	}
	if gitIn(t, e.ws, "stash", "list") == "" {
		t.Error("the stash was not applied")
	}
	if _, err := os.Lstat(filepath.Join(e.ws, "node_modules/c/lib/hooks/use.js")); err != nil {
		t.Errorf("node_modules was not applied: %v", err)
	}
}

// baseRepository makes e's workspace a repository of one commit: a
// README, a Go file, and an npm-like tree its layerseal.yaml excludes.
func baseRepository(t *testing.T, e *env) {
	t.Helper()
	write(t, e.ws, map[string]string{
		"README.md": "hello\n", "src/main.go": "package main\n", "layerseal.yaml": "exclude: [node_modules]\n",
		"node_modules/dep/index.js": "1\n",
	})
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "add", "-A")
	gitIn(t, e.ws, "commit", "-qm", "base")
}
