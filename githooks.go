package layerseal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/gitconfig"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/policy"
)

// GitHooks is what the operator's git configuration makes a workspace's
// git run, as found at launch: the hooks directories core.hooksPath may
// name and the config files that lie in the workspace. Its Globs join the
// session's protected paths.
type GitHooks struct {
	// HooksPaths are the core.hooksPath settings git may use for the
	// workspace's repository: the last one set unconditionally, then any
	// set later in a file git reads only under a condition (an includeIf,
	// a config.worktree, the config of the user sudo ran layerseal for).
	HooksPaths []HooksPath
	// Files are config files git reads that lie in the workspace, found
	// or not (an include may name a file the agent could create), but
	// those a built-in glob protects.
	Files []ConfigFile
	// Repository is the working tree root git finds from the workspace
	// (the workspace or a directory above it holding a .git), "" when
	// there is none.
	Repository string

	ws string // the workspace, resolved
}

// Enclosing returns the root of the repository the workspace lies inside
// but is not the root of, "" otherwise. Git run by the agent stops at the
// workspace, whose overlay is a filesystem boundary in its view, and says
// it is not in a repository; the operator's git sees the applied change
// set as usual.
func (g *GitHooks) Enclosing() string {
	if g.Repository == "" || g.Repository == g.ws {
		return ""
	}
	return g.Repository
}

// A HooksPath is one core.hooksPath setting.
type HooksPath struct {
	Value string // as configured
	File  string // the config file that sets it
	Line  int
	Dir   string // absolute, cleaned; "" when the value names none
	// Globs protect the directory and everything beneath it, relative to
	// the workspace: its path as named, and as its symlinks resolve at
	// launch when that differs. None when it lies outside the workspace.
	Globs []string
}

// A ConfigFile is a git config file inside the workspace.
type ConfigFile struct {
	Path string // absolute
	Glob string // relative to the workspace
}

// Globs returns the globs g adds to a session's protected paths, each
// once, in order.
func (g *GitHooks) Globs() []string {
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, h := range g.HooksPaths {
		for _, s := range h.Globs {
			add(s)
		}
	}
	for _, f := range g.Files {
		add(f.Glob)
	}
	return out
}

// FindGitHooks reads, at launch, the git configuration that applies to
// the workspace ws (a directory) with git's precedence:
// the system's /etc/gitconfig, the global $XDG_CONFIG_HOME/git/config (or
// ~/.config/git/config) and ~/.gitconfig of $HOME, the repository's config
// and its config.worktree, each with its includes. The repository is the
// one git would find from ws: the first of ws and its parents with a .git
// (a directory, or a file "gitdir: PATH" as linked worktrees have, whose
// commondir holds the config). When sudo started layerseal, that user's
// global files are read too, as git run by that user would. A relative
// core.hooksPath is taken from the working tree's root, where git runs
// hooks.
//
// Not read: GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM, GIT_CONFIG_NOSYSTEM and
// the GIT_CONFIG_* of a later command line, which the operator's review
// may set differently; core.worktree. A config file git would refuse
// (bad syntax, larger than gitconfig.MaxSize) is an error.
func FindGitHooks(ws string) (*GitHooks, error) {
	ws, err := resolveDir("workspace", ws)
	if err != nil {
		return nil, err
	}
	return findGitHooks(ws, os.Getenv)
}

func findGitHooks(ws string, getenv func(string) string) (*GitHooks, error) {
	home := getenv("HOME")
	sources := []gitconfig.Source{{Path: "/etc/gitconfig"}}
	sources = append(sources, globalSources(home, getenv("XDG_CONFIG_HOME"), false)...)
	if name := getenv("SUDO_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil && u.HomeDir != "" && u.HomeDir != home {
			sources = append(sources, globalSources(u.HomeDir, "", true)...)
		}
	}
	top, gitDir, commonDir, err := findRepository(ws)
	if err != nil {
		return nil, err
	}
	if gitDir != "" {
		sources = append(sources, gitconfig.Source{Path: filepath.Join(commonDir, "config")},
			gitconfig.Source{Path: filepath.Join(gitDir, "config.worktree"), Conditional: true})
	}
	settings, files, err := gitconfig.Load(sources, home)
	if err != nil {
		return nil, fmt.Errorf("reading git's configuration for core.hooksPath: %w", err)
	}
	g := &GitHooks{Repository: top, ws: ws}
	builtin, err := policy.CompileAll(policy.BuiltinGlobs())
	if err != nil {
		return nil, err
	}
	rules := policy.Rules{Protected: builtin}
	for _, f := range files {
		if !attest.Within(f, ws) || f == ws {
			continue
		}
		glob, err := escapeGlob(ws, f)
		if err != nil {
			return nil, err
		}
		if rules.Violation(attest.Path(strings.TrimPrefix(f, ws+"/"))) == "" { // not protected already
			g.Files = append(g.Files, ConfigFile{f, glob})
		}
	}
	for _, s := range settings {
		if s.Name() != "core.hookspath" {
			continue
		}
		h, err := hooksPath(s, ws, top, home)
		if err != nil {
			return nil, err
		}
		if !s.Conditional {
			g.HooksPaths = g.HooksPaths[:0]
		}
		g.HooksPaths = append(g.HooksPaths, h)
	}
	return g, nil
}

// globalSources are git's global config files for home, in the order git
// reads them.
func globalSources(home, xdg string, cond bool) []gitconfig.Source {
	var out []gitconfig.Source
	if xdg == "" && home != "" {
		xdg = filepath.Join(home, ".config")
	}
	if xdg != "" {
		out = append(out, gitconfig.Source{Path: filepath.Join(xdg, "git", "config"), Conditional: cond})
	}
	if home != "" {
		out = append(out, gitconfig.Source{Path: filepath.Join(home, ".gitconfig"), Conditional: cond})
	}
	return out
}

// hooksPath resolves one core.hooksPath setting for the working tree top.
func hooksPath(s gitconfig.Setting, ws, top, home string) (HooksPath, error) {
	h := HooksPath{Value: s.Value, File: s.File, Line: s.Line}
	if s.NoValue || s.Value == "" || top == "" {
		return h, nil
	}
	dir, err := gitconfig.ExpandPath(s.Value, home)
	if errors.Is(err, gitconfig.ErrPrefix) {
		return h, nil // in git's installation, not the workspace
	}
	if err != nil {
		return h, fmt.Errorf("%s line %d: core.hooksPath %w", s.File, s.Line, err)
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(top, dir)
	}
	h.Dir = filepath.Clean(dir)
	dirs := []string{h.Dir}
	if r, err := filepath.EvalSymlinks(h.Dir); err == nil && r != h.Dir {
		dirs = append(dirs, r)
	}
	for _, d := range dirs {
		if !attest.Within(d, ws) {
			continue
		}
		glob := "**"
		if d != ws {
			rel, err := escapeGlob(ws, d)
			if err != nil {
				return h, fmt.Errorf("%s line %d: core.hooksPath %q: %w", s.File, s.Line, s.Value, err)
			}
			glob = rel + "/**"
		}
		h.Globs = append(h.Globs, glob)
	}
	return h, nil
}

// escapeGlob returns the glob that matches exactly p, a path beneath ws.
func escapeGlob(ws, p string) (string, error) {
	rel := strings.TrimPrefix(p, strings.TrimSuffix(ws, "/")+"/")
	var b strings.Builder
	for i := 0; i < len(rel); i++ {
		if strings.IndexByte(`*?[\`, rel[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(rel[i])
	}
	glob := b.String()
	if err := attest.Path(rel).Valid(); err != nil {
		return "", fmt.Errorf("%q cannot be protected: %w", rel, err)
	}
	if _, err := policy.Compile(glob); err != nil {
		return "", fmt.Errorf("%q cannot be protected: %w", rel, err)
	}
	return glob, nil
}

// findRepository returns the working tree root git would find from ws
// (ws or a parent holding a .git), its git dir and common dir; all ""
// when there is none.
func findRepository(ws string) (top, gitDir, commonDir string, err error) {
	for d := ws; ; d = filepath.Dir(d) {
		dotGit := filepath.Join(d, ".git")
		fi, err := os.Stat(dotGit)
		switch {
		case err == nil && fi.IsDir():
			gitDir = dotGit
		case err == nil && fi.Mode().IsRegular():
			b, err := readSmall(dotGit)
			if err != nil {
				return "", "", "", err
			}
			p, ok := strings.CutPrefix(string(bytes.TrimRight(b, "\r\n")), "gitdir: ")
			if !ok || p == "" {
				return "", "", "", fmt.Errorf("%s: not a \"gitdir: PATH\" file", dotGit)
			}
			if !filepath.IsAbs(p) {
				p = filepath.Join(d, p)
			}
			gitDir = filepath.Clean(p)
		case err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR):
			return "", "", "", err
		}
		if gitDir != "" {
			commonDir = gitDir
			b, err := readSmall(filepath.Join(gitDir, "commondir"))
			switch {
			case err == nil:
				c := string(bytes.TrimRight(b, "\r\n"))
				if !filepath.IsAbs(c) {
					c = filepath.Join(gitDir, c)
				}
				commonDir = filepath.Clean(c)
			case !errors.Is(err, fs.ErrNotExist):
				return "", "", "", err
			}
			return d, gitDir, commonDir, nil
		}
		if d == "/" {
			return "", "", "", nil
		}
	}
}

// readSmall reads a regular file of at most 4 KiB: a .git file or a
// commondir.
func readSmall(path string) ([]byte, error) {
	fd, err := linux.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4097))
	if err == nil && len(b) > 4096 {
		err = fmt.Errorf("%s is larger than 4096 bytes", path)
	}
	return b, err
}

// protectGitHooks adds to protect, a policy's protected globs, those of
// FindGitHooks for ws that it lacks: the launch record then holds them
// like the built-in ones.
func protectGitHooks(ws string, protect []attest.Path) ([]attest.Path, error) {
	g, err := FindGitHooks(ws)
	if err != nil {
		return protect, err
	}
	for _, glob := range g.Globs() {
		if !slices.Contains(protect, attest.Path(glob)) {
			protect = append(slices.Clip(protect), attest.Path(glob))
		}
	}
	return protect, nil
}
