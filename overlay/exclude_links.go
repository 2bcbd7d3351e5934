package overlay

import (
	"errors"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// Bounds on resolving the target of a symlink in an excluded subtree (see
// leaves): links followed per target, as the kernel's MAXSYMLINKS,
// directories held open at once (the depth reached), and path components
// looked up per target and per read. Past a bound the symlink counts as
// leaving its subtree, so it is itemized.
const (
	maxLinksFollowed    = 40
	maxResolveDepth     = 256
	maxResolveSteps     = 4096
	maxResolveStepsRead = 1 << 20
)

// resolver looks up paths in the merged view of the layers a reader
// reads: upper over lower, with whiteouts and opaque directories.
type resolver struct {
	u, l    node   // the layers' roots; l nil when there is no lower layer
	private string // overlay's private xattr prefix ("trusted.overlay.")
	steps   int    // lookups left for the whole read
	// outward are the excluded subtrees a resolution looked outside of,
	// or could not resolve: their summary depends on entries outside
	// them (see ReadChanged).
	outward []attest.Path
}

// mdir is a directory of the merged view: its upper and lower directories,
// either nil when that layer has none (or, for lower, when an opaque
// upper hides it).
type mdir struct{ u, l node }

func (d mdir) close() {
	if d.u != nil {
		d.u.close()
	}
	if d.l != nil {
		d.l.close()
	}
}

// leaves reports whether the symlink at p with target t points outside
// the subtree at root. The target is resolved as the kernel would in the
// merged view the agent left, component by component, following the
// symlinks it passes inside and outside the subtree, not cleaned
// lexically: `t -> .` and `x -> t/t/t/../../../etc` leave. An absolute
// target leaves; so does one that cannot be resolved for certain: `..`
// above the workspace root, a loop or more than maxLinksFollowed links, a
// component that cannot be read, a non-directory followed by more
// components, or a work bound reached. A target whose first missing
// component is its last does not leave when that name lies in the subtree.
func (r *reader) leaves(root, p attest.Path, t string) bool {
	if strings.HasPrefix(t, "/") || r.resolve.u == nil {
		return true
	}
	dir, _ := applySplit(p)
	at, ok, outside := r.resolve.resolve(dir, t, root)
	if (outside || !ok) && !slices.Contains(r.resolve.outward, root) {
		r.resolve.outward = append(r.resolve.outward, root)
	}
	return !ok || !attest.Within(at, root)
}

// resolve returns the path of the merged view that target t, relative to
// directory dir, leads to, or false when that is not certain (see leaves),
// and whether it looked up a name outside the subtree at root on the way.
func (rs *resolver) resolve(dir attest.Path, t string, root attest.Path) (at attest.Path, ok, outside bool) {
	// The directories from the root to the one being resolved in.
	stack := []mdir{{u: rs.u, l: rs.l}}
	names := []string{}
	defer func() {
		for _, d := range stack[1:] {
			d.close()
		}
	}()
	var rest []string
	if dir != attest.Root {
		rest = strings.Split(string(dir), "/")
	}
	inDir := len(rest) // components of dir, walked first
	rest = append(rest, strings.Split(t, "/")...)
	links, steps := 0, 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		inDir--
		if steps++; steps > maxResolveSteps {
			return "", false, outside
		}
		if rs.steps--; rs.steps < 0 {
			return "", false, outside
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(names) == 0 {
				return "", false, true // above the workspace root
			}
			stack[len(stack)-1].close()
			stack, names = stack[:len(stack)-1], names[:len(names)-1]
			continue
		}
		// Past dir, a name looked up outside the subtree.
		outside = outside || inDir < 0 && !attest.Within(pathOf(names), root)
		kind, next, target, err := rs.lookup(stack[len(stack)-1], c)
		if err != nil {
			return "", false, outside
		}
		switch kind {
		case 0: // missing
			if len(rest) > 0 {
				return "", false, outside
			}
			// A dangling link: the name it would make.
			return pathOf(append(names, c)), true, outside
		case unix.S_IFDIR:
			stack, names = append(stack, next), append(names, c)
			if len(stack) > maxResolveDepth {
				return "", false, outside
			}
		case unix.S_IFLNK:
			if links++; links > maxLinksFollowed || strings.HasPrefix(target, "/") {
				return "", false, outside
			}
			rest = append(strings.Split(target, "/"), rest...)
		default:
			if len(rest) > 0 {
				return "", false, outside // a file used as a directory
			}
			names = append(names, c)
		}
	}
	return pathOf(names), true, outside
}

func pathOf(names []string) attest.Path {
	if len(names) == 0 {
		return attest.Root
	}
	return attest.Path(strings.Join(names, "/"))
}

// lookup finds name in the merged directory d: its type (0 when there is
// none), the merged directory for a directory (which the caller closes)
// and the target for a symlink. The upper entry hides the lower one; a
// whiteout hides it and is none; an upper directory marked opaque hides
// the lower directory beneath.
func (rs *resolver) lookup(d mdir, name string) (uint32, mdir, string, error) {
	if d.u != nil {
		st, err := d.u.lstat(name)
		switch {
		case err == nil && isWhiteout(st):
			return 0, mdir{}, "", nil
		case err == nil:
			kind := st.Mode & unix.S_IFMT
			switch kind {
			case unix.S_IFDIR:
				un, err := d.u.open(name, st)
				if err != nil {
					return 0, mdir{}, "", err
				}
				xs, err := un.xattrs()
				if err != nil {
					un.close()
					return 0, mdir{}, "", err
				}
				next := mdir{u: un}
				if !rs.opaque(xs) && d.l != nil {
					if next.l, err = openLowerDir(d.l, name); err != nil {
						un.close()
						return 0, mdir{}, "", err
					}
				}
				return kind, next, "", nil
			case unix.S_IFLNK:
				t, err := readLink(d.u, name, st)
				return kind, mdir{}, t, err
			}
			return kind, mdir{}, "", nil
		case !errors.Is(err, unix.ENOENT):
			return 0, mdir{}, "", err
		}
	}
	if d.l == nil {
		return 0, mdir{}, "", nil
	}
	st, err := d.l.lstat(name)
	if errors.Is(err, unix.ENOENT) {
		return 0, mdir{}, "", nil
	}
	if err != nil {
		return 0, mdir{}, "", err
	}
	kind := st.Mode & unix.S_IFMT
	switch kind {
	case unix.S_IFDIR:
		ln, err := d.l.open(name, st)
		if err != nil {
			return 0, mdir{}, "", err
		}
		return kind, mdir{l: ln}, "", nil
	case unix.S_IFLNK:
		t, err := readLink(d.l, name, st)
		return kind, mdir{}, t, err
	}
	return kind, mdir{}, "", nil
}

// opaque reports whether xs mark an upper directory opaque.
func (rs *resolver) opaque(xs []attest.Xattr) bool {
	for _, x := range xs {
		if x.Name == rs.private+"opaque" && string(x.Value) == "y" {
			return true
		}
	}
	return false
}

// openLowerDir opens the lower directory name of l, or returns nil when l
// holds none (missing, or not a directory).
func openLowerDir(l node, name string) (node, error) {
	st, err := l.lstat(name)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, nil
	}
	return l.open(name, st)
}

// readLink returns the target of symlink name of d, stat'ed as st.
func readLink(d node, name string, st linux.Stat) (string, error) {
	n, err := d.open(name, st)
	if err != nil {
		return "", err
	}
	defer n.close()
	return n.readlink()
}
