package layerseal

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFindGitHooks: core.hooksPath from the global and the repository's
// config, with git's precedence, relative to the working tree's root or
// absolute, inside the workspace or not; a conditional include's value
// joins the one it may override; config files the workspace holds.
func TestFindGitHooks(t *testing.T) {
	dir := t.TempDir()
	home, ws := filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	write := func(p, s string) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := func(vars map[string]string) func(string) string {
		return func(k string) string { return vars[k] }
	}
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	globs := func(e func(string) string, w string) []string {
		t.Helper()
		g, err := findGitHooks(w, e)
		if err != nil {
			t.Fatal(err)
		}
		return g.Globs()
	}
	plain := env(map[string]string{"HOME": home})

	// None set: nothing.
	if g := globs(plain, ws); len(g) != 0 {
		t.Errorf("no hooksPath: %q", g)
	}
	// The global one, relative to the working tree's root.
	write(filepath.Join(home, ".gitconfig"), "[core]\n\thooksPath = .githooks\n")
	if g := globs(plain, ws); !slices.Equal(g, []string{".githooks/**"}) {
		t.Errorf("global: %q", g)
	}
	// XDG's is read before ~/.gitconfig, which wins.
	write(filepath.Join(dir, "xdg/git/config"), "[core]\n\thooksPath = xdg-hooks\n")
	if g := globs(env(map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}), ws); !slices.Equal(g, []string{".githooks/**"}) {
		t.Errorf("xdg then global: %q", g)
	}
	// The repository's wins; an absolute path inside, with glob
	// characters, escaped; a conditional include's value may override it,
	// and the included file in the workspace is a config file to protect.
	write(filepath.Join(ws, ".git/config"), "[core]\n\thooksPath = "+filepath.Join(ws, "h[1]*")+"\n"+
		"[includeIf \"onbranch:dev\"]\n\tpath = ../.gitconfig.dev\n")
	write(filepath.Join(ws, ".gitconfig.dev"), "[core]\n\thooksPath = ~/outside\n[core]\nhooksPath = dev/hooks\n")
	want := []string{`h\[1]\*/**`, "dev/hooks/**", ".gitconfig.dev"}
	if g := globs(plain, ws); !slices.Equal(g, want) {
		t.Errorf("repository: %q, want %q", g, want)
	}
	// A symlink inside the workspace: both names.
	write(filepath.Join(ws, "real/hooks/pre-commit"), "")
	os.Symlink("real/hooks", filepath.Join(ws, "link"))
	write(filepath.Join(ws, ".git/config"), "[core]\nhooksPath = link\n")
	os.Remove(filepath.Join(ws, ".gitconfig.dev"))
	if g := globs(plain, ws); !slices.Equal(g, []string{"link/**", "real/hooks/**"}) {
		t.Errorf("symlink: %q", g)
	}
	// Outside the workspace: nothing to protect there.
	write(filepath.Join(ws, ".git/config"), "[core]\nhooksPath = ../elsewhere\n")
	if g := globs(plain, ws); len(g) != 0 {
		t.Errorf("outside: %q", g)
	}
	// A workspace below the working tree's root: a relative path from the
	// root, protected where it lies in the workspace.
	write(filepath.Join(ws, ".git/config"), "[core]\nhooksPath = sub/hooks\n")
	os.MkdirAll(filepath.Join(ws, "sub/hooks"), 0o755)
	if g := globs(plain, filepath.Join(ws, "sub")); !slices.Equal(g, []string{"hooks/**"}) {
		t.Errorf("workspace below the root: %q", g)
	}
	// A linked worktree: .git is a file; the config is the common dir's.
	main, wt := filepath.Join(dir, "main"), filepath.Join(dir, "wt")
	write(filepath.Join(main, ".git/config"), "[core]\nhooksPath = .husky\n")
	write(filepath.Join(main, ".git/worktrees/wt/commondir"), "../..\n")
	write(filepath.Join(wt, ".git"), "gitdir: "+filepath.Join(main, ".git/worktrees/wt")+"\n")
	if g := globs(plain, wt); !slices.Equal(g, []string{".husky/**"}) {
		t.Errorf("linked worktree: %q", g)
	}
	// A config git would refuse is an error naming the file.
	write(filepath.Join(ws, ".git/config"), "[core\n")
	if _, err := findGitHooks(ws, plain); err == nil || !strings.Contains(err.Error(), filepath.Join(ws, ".git/config")) {
		t.Errorf("bad config: %v", err)
	}
}

// TestEnclosingRepository: a workspace below a repository's root is
// named, so run can warn that git inside will not find it.
func TestEnclosingRepository(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	sub := filepath.Join(repo, "pkg", "sub")
	if err := os.MkdirAll(filepath.Join(repo, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string { return map[string]string{"HOME": filepath.Join(dir, "home")}[k] }
	for ws, want := range map[string]string{repo: "", sub: repo, dir: ""} {
		g, err := findGitHooks(ws, getenv)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Enclosing(); got != want {
			t.Errorf("workspace %s: Enclosing() = %q, want %q", ws, got, want)
		}
	}
}
