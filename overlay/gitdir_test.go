package overlay

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// peek makes fixture files peekers, like fsNode.
func (n *fnode) peek(max int) ([]byte, error) {
	if err := n.fault("peek"); err != nil {
		return nil, err
	}
	return []byte(n.spec.data[:min(max, len(n.spec.data))]), nil
}

// TestHeadRef: what validate_headref in git's setup.c takes for a HEAD.
func TestHeadRef(t *testing.T) {
	for in, want := range map[string]bool{
		"ref: refs/heads/main\n":                         true,
		"ref:refs/x":                                     true,
		"ref: \t\r\n refs/":                              true,
		"ref: refs":                                      false,
		"ref: heads/main\n":                              false,
		"ref:\vrefs/heads/main":                          false, // not one of git's blanks
		strings.Repeat("a", 40):                          true,
		strings.Repeat("0123456789abcdefABCDEF", 2):      true,
		strings.Repeat("a", 39):                          false,
		strings.Repeat("a", 39) + "g":                    false,
		strings.Repeat("a", 20) + "\x00" + "bbb":         false, // a C string ends at NUL
		"ref: refs/heads/x\x00" + strings.Repeat("z", 9): true,
		"":                  false,
		"# not a ref\n":     false,
		"{\"name\": \"x\"}": false,
	} {
		if got := headRef([]byte(in)); got != want {
			t.Errorf("headRef(%q) = %t, want %t", in, got, want)
		}
	}
}

// TestGitLayout: the layout git's is_git_directory takes for a
// repository, in one layer or in the merged view of two.
func TestGitLayout(t *testing.T) {
	head := func() *spec { return file("ref: refs/heads/main\n") }
	bare := func() fx { return fx{"HEAD": head(), "objects": dir(), "refs": dir(), "config": file("[core]\n")} }
	with := func(f fx, k string, s *spec) fx {
		if s == nil {
			delete(f, k)
		} else {
			f[k] = s
		}
		return f
	}
	for _, c := range []struct {
		name         string
		upper, lower fx // nil: no such layer
		want         bool
	}{
		{"bare layout", bare(), nil, true},
		{"no HEAD", with(bare(), "HEAD", nil), nil, false},
		{"no objects", with(bare(), "objects", nil), nil, false},
		{"no refs", with(bare(), "refs", nil), nil, false},
		{"HEAD not a ref", with(bare(), "HEAD", file("hello\n")), nil, false},
		{"HEAD an object name", with(bare(), "HEAD", file(strings.Repeat("f", 40)+"\n")), nil, true},
		{"HEAD a directory", with(bare(), "HEAD", dir()), nil, false},
		{"HEAD a FIFO", with(bare(), "HEAD", fifo()), nil, false},
		{"HEAD a symlink into refs", with(bare(), "HEAD", symlink("refs/heads/main")), nil, true},
		{"HEAD a symlink elsewhere", with(bare(), "HEAD", symlink("../HEAD")), nil, false},
		{"objects a plain file", with(bare(), "objects", file("")), nil, false},
		{"objects an executable file", with(bare(), "objects", file("").mode(0o755)), nil, true},
		{"objects a symlink", with(bare(), "objects", symlink("/usr")), nil, true},
		{"commondir instead", fx{"HEAD": head(), "commondir": file("../..\n")}, nil, true},
		{"commondir without HEAD", fx{"commondir": file("../..\n"), "objects": dir(), "refs": dir()}, nil, false},
		{"npm package", fx{"index.js": file(""), "config": file(""), "objects": dir(), "refs": dir()}, nil, false},
		{"HEAD added over lower objects and refs", fx{"HEAD": head()}, fx{"objects": dir(), "refs": dir()}, true},
		{"lower repository", fx{"config": file("")}, bare(), true},
		{"lower HEAD whited out", fx{"HEAD": whiteout()}, bare(), false},
		{"lower objects whited out", fx{"objects": whiteout()}, bare(), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d mergedDir
			if c.upper != nil {
				d.u = c.upper.build(t)
			}
			if c.lower != nil {
				d.l = c.lower.build(t)
			}
			if got, err := gitLayout(d); got != c.want || err != nil {
				t.Errorf("gitLayout = %t, %v, want %t", got, err, c.want)
			}
		})
	}
	// Where it cannot tell, it says so.
	for name, f := range map[string]fx{
		"HEAD unreadable":       with(bare(), "HEAD", head().fail("peek", unix.EIO)),
		"HEAD not opened":       with(bare(), "HEAD", head().fail("open", unix.EACCES)),
		"objects not stat'ed":   with(bare(), "objects", dir().fail("lstat", unix.EIO)),
		"commondir not stat'ed": with(bare(), "commondir", file("x").fail("lstat", unix.EIO)),
	} {
		if _, err := gitLayout(mergedDir{u: f.build(t)}); !errors.Is(err, unix.EIO) && !errors.Is(err, unix.EACCES) {
			t.Errorf("%s: gitLayout error %v, want the lookup's", name, err)
		}
	}
}

// TestReadExcludeGitItemized: in an excluded subtree, every entry named
// .git and the entries that make a directory a repository, or that git
// runs commands through in one, are itemized; an npm-like tree with files
// named config, index, objects and refs stays counted.
func TestReadExcludeGitItemized(t *testing.T) {
	upper := fx{
		"node_modules":                                  dir(),
		"node_modules/pkg/package.json":                 file("{}"),
		"node_modules/pkg/config":                       file("x"),
		"node_modules/pkg/index":                        file("x"),
		"node_modules/pkg/objects/a.js":                 file("x"),
		"node_modules/pkg/refs/b.js":                    file("x"),
		"node_modules/pkg/lib/hooks/useX.js":            file("x"),
		"node_modules/evil/HEAD":                        file("ref: refs/heads/main\n"),
		"node_modules/evil/objects":                     dir(),
		"node_modules/evil/refs/heads":                  dir(),
		"node_modules/evil/config":                      file("[core]\n\tfsmonitor = x\n"),
		"node_modules/evil/description":                 file("d"),
		"node_modules/sub/.git/config":                  file("[core]\n"),
		"node_modules/sub/a.js":                         file("x"),
		"node_modules/old/hooks/pre-commit":             file("#!/bin/sh\n"),
		"node_modules/old/rebase-merge/git-rebase-todo": file("exec x\n"),
	}
	lower := fx{
		"node_modules":             dir(),
		"node_modules/old/HEAD":    file("ref: refs/heads/main\n"),
		"node_modules/old/objects": dir(),
		"node_modules/old/refs":    dir(),
	}
	ch, err := readFx(t, upper, lower, ReadOptions{Exclude: func(p attest.Path) bool { return p == "node_modules" }})
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, summary(ch), lines(
		"added node_modules/evil/HEAD",
		"added node_modules/evil/config",
		"added node_modules/evil/objects",
		"added node_modules/evil/refs",
		"added node_modules/evil/refs/heads",
		"added node_modules/old/hooks",
		"added node_modules/old/hooks/pre-commit",
		"added node_modules/old/rebase-merge",
		"added node_modules/old/rebase-merge/git-rebase-todo",
		"added node_modules/sub/.git",
		"added node_modules/sub/.git/config",
	))
	if len(ch.Excluded) != 1 || ch.Excluded[0].Entries != 17 {
		t.Errorf("excluded = %+v, want node_modules with the 17 other entries counted", ch.Excluded)
	}
}

// TestViewGitDir: View finds git's repository layout before (lower) and
// after (upper over lower) in real layers, through whiteouts and opaque
// directories, without following symlinks.
func TestViewGitDir(t *testing.T) {
	privtest.Require(t) // whiteouts and trusted xattrs
	base := t.TempDir()
	upper, lower := filepath.Join(base, "upper"), filepath.Join(base, "lower")
	mk := func(root string, files map[string]string) {
		for name, data := range files {
			p := filepath.Join(root, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			var err error
			switch {
			case strings.HasSuffix(name, "/"):
				err = os.MkdirAll(p, 0o755)
			case data == "<whiteout>":
				err = unix.Mknod(p, unix.S_IFCHR, 0)
			case strings.HasPrefix(data, "-> "):
				err = os.Symlink(data[3:], p)
			default:
				err = os.WriteFile(p, []byte(data), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	bare := func(d string) map[string]string {
		return map[string]string{d + "/HEAD": "ref: refs/heads/main\n", d + "/objects/": "", d + "/refs/": ""}
	}
	lowerFiles := map[string]string{"src/main.go": "x", "gone/x": "", "hidden/x": "", "link/x": ""}
	for _, d := range []string{"old", "gone/r", "hidden/r", "unchanged", "."} {
		for k, v := range bare(d) {
			lowerFiles[k] = v
		}
	}
	mk(lower, lowerFiles)
	upperFiles := map[string]string{
		"old/HEAD":   "<whiteout>", // a repository no more
		"gone":       "<whiteout>",
		"hidden/new": "",
		"via/link":   "-> ../new", // not followed
		"src/HEAD":   "ref: refs/heads/main\n", "src/objects/": "", "src/refs/": "",
		"added/r/HEAD": strings.Repeat("1", 40), "added/r/objects/": "", "added/r/refs/": "",
		"new/HEAD": "ref: refs/heads/main\n", "new/objects/": "", "new/refs/": "",
	}
	mk(upper, upperFiles)
	if err := unix.Setxattr(filepath.Join(upper, "hidden"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	v, err := OpenView(upper, lower, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for p, want := range map[attest.Path][2]bool{
		".":           {true, true},
		"unchanged":   {true, true},
		"old":         {true, false},
		"gone/r":      {true, false},
		"hidden/r":    {true, false},
		"src":         {false, true},
		"added/r":     {false, true},
		"new":         {false, true},
		"via/link":    {false, false},
		"missing":     {false, false},
		"src/main.go": {false, false},
	} {
		for i := 0; i < 2; i++ { // the second answer comes from memory
			before, after := v.GitDir(p)
			if [2]bool{before, after} != want {
				t.Errorf("GitDir(%q) = %t, %t, want %t, %t", p, before, after, want[0], want[1])
			}
		}
	}
}
