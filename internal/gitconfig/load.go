package gitconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// A Source is a config file for Load to read.
type Source struct {
	Path string // absolute
	// Conditional marks a file git reads only under a condition Load does
	// not check (a worktree's config.worktree, read when the repository
	// sets extensions.worktreeConfig).
	Conditional bool
}

// A Setting is an Entry and where Load found it.
type Setting struct {
	Entry
	File string // the file it was read from
	// Conditional: git reads it only under a condition Load did not
	// check: from a conditional Source, or through an includeIf.
	Conditional bool
}

// MaxDepth bounds the nesting of includes, as git's own limit does.
const MaxDepth = 10

// MaxFiles bounds the files one Load reads.
const MaxFiles = 64

// Load returns the settings of the sources, in the order git reads them:
// source by source, each include.path and includeIf.COND.path read where
// it stands. It also returns every file it looked for, found or not, the
// sources and the included files alike (absolute and cleaned): a file an
// include names but that is missing is read by git once it exists.
//
// A missing file is skipped, as git skips it. An include's path is
// expanded as git expands a pathname: "~/" is home, "~user/" that user's
// home, and a relative path is taken from the including file's directory.
// The condition of an includeIf is not evaluated: its settings are
// returned marked Conditional. Files are opened following symlinks, as
// git does, and must be regular; each is bounded by MaxSize, their count
// by MaxFiles and the nesting of includes by MaxDepth.
func Load(sources []Source, home string) ([]Setting, []string, error) {
	l := &loader{home: home}
	for _, s := range sources {
		if err := l.file(filepath.Clean(s.Path), s.Conditional, 0); err != nil {
			return nil, l.files, err
		}
	}
	return l.out, l.files, nil
}

type loader struct {
	home  string
	out   []Setting
	files []string
}

func (l *loader) file(path string, cond bool, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%s: includes nested deeper than %d", path, MaxDepth)
	}
	if len(l.files) >= MaxFiles {
		return fmt.Errorf("%s: more than %d config files", path, MaxFiles)
	}
	l.files = append(l.files, path)
	entries, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		l.out = append(l.out, Setting{Entry: e, File: path, Conditional: cond})
		include := e.Section == "include" && e.Subsection == ""
		includeIf := e.Section == "includeif" && e.Subsection != ""
		if e.Key != "path" || !include && !includeIf {
			continue
		}
		if e.NoValue || e.Value == "" {
			return fmt.Errorf("%s line %d: %s has no path", path, e.Line, e.Name())
		}
		p, err := l.expand(e.Value, filepath.Dir(path))
		if errors.Is(err, ErrPrefix) {
			continue // git's own installation: no file of the workspace's
		}
		if err != nil {
			return fmt.Errorf("%s line %d: %s: %w", path, e.Line, e.Name(), err)
		}
		if err := l.file(p, cond || includeIf, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// expand resolves a pathname value as git does, relative ones from dir.
func (l *loader) expand(v, dir string) (string, error) {
	p, err := ExpandPath(v, l.home)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), nil
}

// ErrPrefix is ExpandPath's error for a value that starts with
// "%(prefix)/": a path in git's own installation, which Load does not
// know (and skips, for an include).
var ErrPrefix = errors.New("%(prefix)/ names git's installation")

// ExpandPath expands a pathname value as git does: "~" or "~/..." from
// home, "~user/..." from that user's home. Other values, relative ones
// included, are returned as they are; "%(prefix)/..." fails with
// ErrPrefix.
func ExpandPath(v, home string) (string, error) {
	switch {
	case strings.HasPrefix(v, "%(prefix)/"):
		return "", fmt.Errorf("%q: %w", v, ErrPrefix)
	case v == "~" || strings.HasPrefix(v, "~/"):
		if home == "" {
			return "", fmt.Errorf("%q: no home directory to expand ~ with", v)
		}
		return home + v[1:], nil
	case strings.HasPrefix(v, "~"):
		name, rest, _ := strings.Cut(v[1:], "/")
		u, err := user.Lookup(name)
		if err != nil {
			return "", fmt.Errorf("%q: %w", v, err)
		}
		return filepath.Join(u.HomeDir, rest), nil
	}
	return v, nil
}

// readFile parses the config file at path: a regular file of at most
// MaxSize bytes. A FIFO or device is refused without blocking on it.
func readFile(path string) ([]Entry, error) {
	fd, err := linux.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("config file %s is not a regular file (%s)", path, fi.Mode().Type())
	}
	entries, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return entries, nil
}
