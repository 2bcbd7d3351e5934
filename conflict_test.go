package layerseal

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// TestConflicts: an entry changed after the launch, one removed, and one
// created in a directory someone else changed are conflicts; entries
// untouched, and entries created in untouched directories, are not.
func TestConflicts(t *testing.T) {
	ws := t.TempDir()
	for _, d := range []string{"a", "b", "c/deep"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"a/edited", "a/same", "b/removed", "c/deep/same"} {
		if err := os.WriteFile(filepath.Join(ws, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // past the coarse clock's tick
	since := linux.CoarseNow()
	time.Sleep(20 * time.Millisecond)
	if err := os.WriteFile(filepath.Join(ws, "a/edited"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, "b/removed")); err != nil {
		t.Fatal(err)
	}
	// Absent paths beneath absent ones are found absent without a look
	// of their own; their nearest existing ancestor still decides.
	paths := []attest.Path{"a/edited", "a/same", "a/new", "b/added", "b/gone", "b/gone/x", "b/gone/x/y", "b/removed",
		"c/deep/same", "c/deep/new", "c/deep/new/x", "c/deep/new/x/y", "c/new"}
	dir, err := os.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	got := conflicts(dir, paths, since)
	want := []attest.Path{"a/edited", "b/added", "b/gone", "b/gone/x", "b/gone/x/y", "b/removed"}
	if !slices.Equal(got, want) {
		t.Errorf("conflicts = %q, want %q", got, want)
	}
	if got := conflicts(dir, paths, linux.CoarseNow().Add(time.Second)); len(got) != 0 {
		t.Errorf("conflicts with a later launch = %q, want none", got)
	}
	if err := os.Rename(ws, ws+".moved"); err != nil {
		t.Fatal(err)
	}
	if got := conflicts(dir, paths, since); !slices.Equal(got, want) {
		t.Errorf("after the workspace path moved, conflicts = %q, want %q: they are found beneath the directory, not its path", got, want)
	}
}

// TestWorkspaceChangedGitHint: a conflict at .git/index or at the .git
// directory itself (whose mtime the operator's git status moves) says
// that git did it.
func TestWorkspaceChangedGitHint(t *testing.T) {
	for _, c := range []struct {
		paths []attest.Path
		hint  bool
	}{{[]attest.Path{".git/index"}, true}, {[]attest.Path{".git"}, true}, {[]attest.Path{"src/a"}, false}} {
		msg := (&WorkspaceChangedError{Out: "o", Paths: c.paths}).Error()
		if strings.Contains(msg, "`git status` included") != c.hint {
			t.Errorf("%v: %s", c.paths, msg)
		}
	}
}
