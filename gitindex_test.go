package layerseal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/gitindex"
	"github.com/layerseal/layerseal/policy"
)

// TestIndexRule compares indexes git wrote: what git's ordinary commands
// leave breaks no rule; the flags that hide edits and new or moved
// gitlinks do, and flags or gitlinks the index had at launch do not.
func TestIndexRule(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("this test needs git: %v", err)
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	put := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index := func() *gitindex.Index {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
		if err != nil {
			t.Fatal(err)
		}
		ix, err := gitindex.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	git("init", "-q")
	put("a.sh", "a\n")
	put("b.txt", "b\n")
	put("c.txt", "c\n")
	git("add", ".")
	git("commit", "-qm", "one")
	head := git("rev-parse", "HEAD")
	launch := index()

	step := func(name, want string, cmds ...[]string) {
		t.Helper()
		before := index()
		for _, c := range cmds {
			git(c...)
		}
		if got := indexRule(before, index()); got != want {
			t.Errorf("%s: rule %q, want %q", name, got, want)
		}
	}
	put("a.sh", "a2\n")
	step("ordinary", "", []string{"checkout", "-q", "-b", "x"}, []string{"add", "a.sh"}, []string{"commit", "-qm", "two"},
		[]string{"rm", "-q", "c.txt"}, []string{"stash", "-q"}, []string{"stash", "pop", "-q"}, []string{"update-index", "--index-version", "4"})
	step("skip-worktree", policy.RuleIndexHides, []string{"update-index", "--skip-worktree", "a.sh"})
	step("skip-worktree kept", "", []string{"update-index", "--assume-unchanged", "a.sh"}, []string{"update-index", "--no-assume-unchanged", "a.sh"})
	step("assume-unchanged", policy.RuleIndexHides, []string{"update-index", "--assume-unchanged", "b.txt"})
	step("gitlink", policy.RuleIndexGitlink, []string{"update-index", "--add", "--cacheinfo", "160000," + head + ",sub"})
	step("gitlink kept", "", []string{"update-index", "--index-version", "3"})
	two := git("rev-parse", "HEAD")
	step("gitlink moved", policy.RuleIndexGitlink, []string{"update-index", "--cacheinfo", "160000," + two + ",sub"})
	if got := indexRule(launch, index()); got != policy.RuleIndexGitlink {
		t.Errorf("from launch: rule %q, want the gitlink's", got)
	}
	if got := indexRule(&gitindex.Index{}, launch); got != "" {
		t.Errorf("a first index of plain files: rule %q", got)
	}
}

// TestLowerIndex: the launch index is empty where the workspace has no
// .git directory (none, or a linked work tree's "gitdir:" file) or no
// index, and unknown (nil) where it cannot be read in full.
func TestLowerIndex(t *testing.T) {
	for name, tc := range map[string]struct {
		files map[string]string
		link  bool // .git/index a symlink to a real index
		path  attest.Path
		empty bool
	}{
		"no .git":        {files: map[string]string{"a": "a"}, empty: true},
		".git file":      {files: map[string]string{".git": "gitdir: /elsewhere\n"}, empty: true},
		"no index":       {files: map[string]string{".git/HEAD": "ref: refs/heads/main\n"}, empty: true},
		"garbage":        {files: map[string]string{".git/index": "garbage"}},
		"index a link":   {files: map[string]string{".git/HEAD": "x"}, link: true},
		"nested":         {files: map[string]string{"sub/.git/index": "garbage"}, path: "sub/.git/index"},
		"nested no .git": {files: map[string]string{"sub/x": "x"}, path: "sub/.git/index", empty: true},
		"nested .git file": {files: map[string]string{"sub/.git": "gitdir: ../.git/modules/sub\n", ".git/modules/sub/index": "garbage"},
			path: "sub/.git/index", empty: true},
	} {
		if tc.path == "" {
			tc.path = gitIndexPath
		}
		dir := t.TempDir()
		for p, s := range tc.files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if tc.link {
			cmd := exec.Command("git", "init", "-q", filepath.Join(dir, "real"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git init: %v\n%s", err, out)
			}
			cmd = exec.Command("git", "-C", filepath.Join(dir, "real"), "update-index", "--add", "--cacheinfo", "100644,e69de29bb2d1d6434b8b29ae775ad8c2e48c5391,x")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git update-index: %v\n%s", err, out)
			}
			if err := os.Symlink("../real/.git/index", filepath.Join(dir, ".git/index")); err != nil {
				t.Fatal(err)
			}
		}
		ix, err := lowerIndex(&reader{lower: dir}, tc.path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if tc.empty != (ix != nil) || ix != nil && len(ix.Entries) != 0 {
			t.Errorf("%s: %+v, want empty %t", name, ix, tc.empty)
		}
	}
}
