package overlay

import (
	"bytes"
	"errors"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// GitLayoutName reports whether name is an entry by which git takes the
// directory holding it for a repository (is_git_directory in git's
// setup.c): HEAD, objects, refs, or commondir, which moves objects and
// refs elsewhere.
func GitLayoutName(name string) bool {
	switch name {
	case "HEAD", "objects", "refs", "commondir":
		return true
	}
	return false
}

// GitControlName reports whether name is an entry of a repository through
// which git runs commands or finds another repository when the operator
// runs it, as opposed to the entries git's ordinary work writes (objects,
// refs, HEAD, index, logs, ...): the configuration (config, and
// config.worktree with extensions.worktreeConfig), commondir, hooks,
// info (exclude and attributes: what git status hides, how git diff
// shows it), and the state of operations left in progress whose scripts
// git runs on --continue (rebase-merge, rebase-apply, sequencer).
func GitControlName(name string) bool {
	switch name {
	case "config", "config.worktree", "commondir", "hooks", "info", "rebase-merge", "rebase-apply", "sequencer":
		return true
	}
	return false
}

// headMax is what git reads of HEAD to validate it (validate_headref).
const headMax = 255

// mergedDir is one directory as a view shows it: u over l, either nil
// where that layer holds no directory there (l is nil too where the
// upper directory hides the lower one). Whiteouts in either layer show
// nothing.
type mergedDir struct{ u, l node }

// entry returns the node holding the entry name that the view shows and
// its stat; ok is false when the view shows none.
func (d mergedDir) entry(name string) (in node, st linux.Stat, ok bool, err error) {
	if d.u != nil {
		st, err := d.u.lstat(name)
		switch {
		case err == nil && isWhiteout(st):
			return nil, st, false, nil
		case err == nil:
			return d.u, st, true, nil
		case !errors.Is(err, unix.ENOENT):
			return nil, st, false, err
		}
	}
	if d.l != nil {
		st, err := d.l.lstat(name)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
			return nil, st, false, nil
		case err != nil:
			return nil, st, false, err
		case isWhiteout(st):
			return nil, st, false, nil
		}
		return d.l, st, true, nil
	}
	return nil, linux.Stat{}, false, nil
}

// peeker is a node that can read the start of a regular file.
type peeker interface {
	// peek returns at most max bytes from the start of the file.
	peek(max int) ([]byte, error)
}

// gitLayout reports whether git would take the directory d for a
// repository, as is_git_directory does: HEAD valid (validate_headref: a
// symlink whose target starts with "refs/", or a file that starts with
// "ref:", blanks and "refs/", or with an object name in hex), and either
// commondir present (the objects and refs are then where it points, which
// may lie outside the workspace: taken as found) or objects and refs that
// access(X_OK) would accept (a directory, a symlink, whatever it leads
// to, or another file with an execute bit). GIT_OBJECT_DIRECTORY in the
// operator's environment is not considered. An error says it could not
// tell (a lookup or read that failed other than by absence).
func gitLayout(d mergedDir) (bool, error) {
	in, st, ok, err := d.entry("HEAD")
	if err != nil || !ok {
		return false, err
	}
	if valid, err := validHead(in, st); err != nil || !valid {
		return false, err
	}
	if _, _, ok, err := d.entry("commondir"); err != nil || ok {
		return ok, err
	}
	for _, name := range []string{"objects", "refs"} {
		_, st, ok, err := d.entry(name)
		if err != nil || !ok || !accessX(st) {
			return false, err
		}
	}
	return true, nil
}

// accessX reports whether access(X_OK) by root may succeed on the entry
// st describes: a directory, a symlink (followed by access), or a file
// with an execute bit.
func accessX(st linux.Stat) bool {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFLNK:
		return true
	}
	return st.Mode&0o111 != 0
}

// validHead reports whether the HEAD entry of dir (stat st) is one git's
// validate_headref accepts.
func validHead(dir node, st linux.Stat) (bool, error) {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK, unix.S_IFREG:
	default:
		return false, nil // a directory fails to read, a FIFO blocks git
	}
	n, err := dir.open("HEAD", st)
	if err != nil {
		return false, err
	}
	defer n.close()
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := n.readlink()
		return strings.HasPrefix(t, "refs/"), err
	}
	p, ok := n.(peeker)
	if !ok {
		return false, errors.New("HEAD: cannot read this layer's files")
	}
	b, err := p.peek(headMax)
	return headRef(b), err
}

// headRef reports whether b, the start of a HEAD file, is what
// validate_headref accepts: "ref:", git's blanks (space, tab, newline,
// carriage return), then "refs/"; or at least 40 hex digits (an object
// name of SHA-1, or the start of one of SHA-256). Git reads it as a C
// string: a NUL ends it.
func headRef(b []byte) bool {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if rest, ok := bytes.CutPrefix(b, []byte("ref:")); ok {
		if bytes.HasPrefix(bytes.TrimLeft(rest, " \t\n\r"), []byte("refs/")) {
			return true
		}
	}
	if len(b) < 40 {
		return false
	}
	for _, c := range b[:40] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// peek reads at most max bytes from the start of the regular file n was
// checked to be, through a descriptor reopened from the checked one.
func (n *fsNode) peek(max int) ([]byte, error) {
	fd, err := n.openForDigest(false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	b := make([]byte, max)
	k := 0
	for k < max {
		r, err := unix.Read(fd, b[k:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if r == 0 {
			break
		}
		k += r
	}
	return b[:k], nil
}

// gitItemized reports whether the entry name at p in an excluded subtree
// must be itemized for what git makes of it: any entry named .git, and
// the entries of a directory with git's repository layout (before or
// after the change) that make it one or that git runs commands through
// (GitLayoutName, GitControlName). u is the upper directory holding
// name, l the lower one (nil, or hidden: none shows through). Only names
// of those kinds cost a look at the directory, once per directory.
func (r *reader) gitItemized(p attest.Path, name string, u, l node, hidden bool) bool {
	if name == ".git" {
		return true
	}
	if !GitLayoutName(name) && !GitControlName(name) {
		return false
	}
	if hidden {
		l = nil
	}
	dir, _ := applySplit(p)
	repo, ok := r.gitDirs[dir]
	if !ok {
		// Itemized where it cannot tell: classified, a failure becomes
		// its reason.
		after, err := gitLayout(mergedDir{u: u, l: l})
		repo = after || err != nil
		if !repo && l != nil {
			before, err := gitLayout(mergedDir{l: l})
			repo = before || err != nil
		}
		if r.gitDirs == nil {
			r.gitDirs = map[attest.Path]bool{}
		}
		r.gitDirs[dir] = repo
	}
	return repo
}

// View looks up directories in the merged view of an overlay that is not
// mounted (upper over lower: whiteouts hide, opaque directories hide the
// lower directory), by descriptors only, never following a symlink or
// leaving a layer's mount. It remembers what it found per directory, so
// the cost of its answers stays proportional to the directories asked
// about.
type View struct {
	u, l    *fsNode
	private string // "trusted.overlay." or "user.overlay."
	memo    map[attest.Path][2]bool
}

// OpenView opens the layers of a view: upper, and lower (lowerDir, the
// lower layer's root as the caller opened and identified it, when set;
// the path lower only names it then). xattrNS is the namespace of
// overlay's private xattrs ("" is DefaultXattrNS). Close releases it.
func OpenView(upper, lower string, lowerDir *os.File, xattrNS string) (*View, error) {
	if xattrNS == "" {
		xattrNS = DefaultXattrNS
	}
	u, l, err := openLayers(upper, lower, lowerDir)
	if err != nil {
		return nil, err
	}
	return &View{u: u, l: l, private: xattrNS + ".overlay.", memo: map[attest.Path][2]bool{}}, nil
}

// Close closes the view's layers.
func (v *View) Close() {
	v.u.close()
	v.l.close()
}

// GitDir reports whether git would take the directory at p for a
// repository by its layout (see GitLayoutName) in the lower layer
// (before the change) and in the merged view (after). Where a lookup
// fails other than by absence it answers false, true: a repository made
// by the change, the answer that breaks the most rules.
func (v *View) GitDir(p attest.Path) (before, after bool) {
	if got, ok := v.memo[p]; ok {
		return got[0], got[1]
	}
	before, err := v.layout(p, false)
	if err == nil {
		after, err = v.layout(p, true)
	}
	if err != nil {
		before, after = false, true
	}
	v.memo[p] = [2]bool{before, after}
	return before, after
}

// layout is gitLayout of the directory at p in the merged view (or, without
// merged, in the lower layer alone); false where there is none.
func (v *View) layout(p attest.Path, merged bool) (bool, error) {
	d, ok, err := v.dir(p, merged)
	if err != nil || !ok {
		return false, err
	}
	defer d.close(v)
	return gitLayout(d)
}

// close closes the nodes of d that are not the view's roots.
func (d mergedDir) close(v *View) {
	for _, n := range []node{d.u, d.l} {
		if n != nil && n != node(v.u) && n != node(v.l) {
			n.close()
		}
	}
}

// dir opens the directory at p in the merged view (or, without merged,
// in the lower layer alone); ok is false when there is none there.
func (v *View) dir(p attest.Path, merged bool) (d mergedDir, ok bool, err error) {
	d = mergedDir{l: v.l}
	if merged {
		d.u = v.u
	}
	if p == attest.Root {
		return d, true, nil
	}
	for c := range strings.SplitSeq(string(p), "/") {
		next, ok, err := v.step(d, c)
		d.close(v)
		if err != nil || !ok {
			return mergedDir{}, false, err
		}
		d = next
	}
	return d, true, nil
}

// step opens the child directory c of d, as the view shows it.
func (v *View) step(d mergedDir, c string) (next mergedDir, ok bool, err error) {
	hideLower := false
	if d.u != nil {
		st, err := d.u.lstat(c)
		switch {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return next, false, err
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return next, false, nil // a whiteout or another file
		default:
			if next.u, err = d.u.open(c, st); err != nil {
				return next, false, err
			}
			xs, err := next.u.xattrs()
			if err != nil {
				next.close(v)
				return mergedDir{}, false, err
			}
			for _, x := range xs {
				if x.Name == v.private+"opaque" && string(x.Value) == "y" {
					hideLower = true
				}
			}
		}
	}
	if d.l != nil && !hideLower {
		st, err := d.l.lstat(c)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		case err != nil:
			next.close(v)
			return mergedDir{}, false, err
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			if next.l, err = d.l.open(c, st); err != nil {
				next.close(v)
				return mergedDir{}, false, err
			}
		case next.u == nil && !isWhiteout(st):
			return next, false, nil // a file: no directory here
		}
	}
	return next, next.u != nil || next.l != nil, nil
}
