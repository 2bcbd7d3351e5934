package layerseal

import (
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestRepoChange: which changes break the (git repository) rule, given
// which directories have git's layout before and after, and how many
// directories it looks at.
func TestRepoChange(t *testing.T) {
	layout := map[attest.Path][2]bool{ // before, after
		".git":           {true, true},
		"src":            {false, true},
		"old":            {true, false},
		"vendor/lib.git": {true, true},
	}
	dir, file := &attest.State{Type: attest.Dir}, &attest.State{Type: attest.File}
	link := &attest.State{Type: attest.Symlink}
	for _, c := range []struct {
		p        attest.Path
		old, new *attest.State
		want     bool
	}{
		{"sub/.git", nil, dir, true},
		{"sub/.git", nil, file, true},
		{"sub/.git", file, file, true}, // gitdir: changed
		{"sub/.git", dir, link, true},
		{".git", dir, dir, false}, // its mtime moves with every commit
		{"sub/.git", dir, nil, false},
		{"src/HEAD", nil, file, true},
		{"src/objects", nil, dir, true},
		{"src/refs", nil, dir, true},
		{"src/config", nil, file, true},
		{"src/hooks/pre-commit", nil, file, true},
		{"src/description", nil, file, false},
		{"src/objects/ab/cd", nil, file, false}, // reverted with src/objects
		{"old/config", file, file, true},
		{"old/HEAD", file, nil, false}, // no repository made
		{"vendor/lib.git/hooks/pre-commit", nil, file, true},
		{"vendor/lib.git/info/attributes", nil, file, true},
		{"vendor/lib.git/rebase-merge/git-rebase-todo", nil, file, true},
		{"vendor/lib.git/sequencer/todo", nil, file, true},
		{"vendor/lib.git/config.worktree", nil, file, true},
		{"vendor/lib.git/HEAD", file, file, false},
		{"vendor/lib.git/refs/heads/main", nil, file, false},
		{"vendor/lib.git/packed-refs", file, file, false},
		{"x/.git/rebase-apply/patch", nil, file, true}, // named .git: no layout needed
		{".git/index", file, file, false},
		{".git/objects/ab/cdef", nil, file, false},
		{".git/refs/heads/hooks/x", nil, file, false}, // a branch named hooks/x
		{".git/logs/HEAD", file, file, false},
		{".git/ORIG_HEAD", nil, file, false},
		{".git/COMMIT_EDITMSG", nil, file, false},
		{".git/hooks/pre-commit", nil, file, true},
		{"README.md", file, file, false},
		{"web/src/hooks/useX.ts", nil, file, false},
		{"node_modules/pkg/config", nil, file, false},
	} {
		asked := 0
		gitDir := func(d attest.Path) (bool, bool) {
			asked++
			l := layout[d]
			return l[0], l[1]
		}
		e := attest.Entry{Path: c.p, Old: c.old, New: c.new}
		if got := repoChange(e, gitDir); got != c.want {
			t.Errorf("%s (%v → %v): violation %t, want %t", c.p, c.old, c.new, got, c.want)
		}
		if asked > 2 {
			t.Errorf("%s: %d directories looked at", c.p, asked)
		}
	}
}
