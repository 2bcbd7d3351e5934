package overlay

import (
	"crypto/sha256"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// fx describes one in-memory layer: path (relative, "/"-separated, "." for
// the root) to what it holds. Missing parents are plain directories.
type fx map[string]*spec

// spec is one fixture file, built with file, dir, symlink, … and adjusted
// with the chainable methods below.
type spec struct {
	st     linux.Stat
	data   string
	target string
	xattrs []attest.Xattr
	faults map[string]error // by node method: lstat, open, names, xattrs, readlink, digest
	linkTo string           // share the inode of this path
}

// Every fixture file has the same mtime unless told otherwise, as a
// copied-up file has its lower file's.
const fxMtime = 1_700_000_000_000_000_000

func mk(mode uint32) *spec {
	return &spec{st: linux.Stat{Dev: 1, MountID: 1, HasMountID: true, Mode: mode, Nlink: 1, MtimeNS: fxMtime}}
}

func file(data string) *spec {
	s := mk(unix.S_IFREG | 0o644)
	s.data, s.st.Size = data, uint64(len(data))
	return s
}
func dir() *spec { return mk(unix.S_IFDIR | 0o755) }
func symlink(target string) *spec {
	s := mk(unix.S_IFLNK | 0o777)
	s.target, s.st.Size = target, uint64(len(target))
	return s
}
func fifo() *spec   { return mk(unix.S_IFIFO | 0o644) }
func socket() *spec { return mk(unix.S_IFSOCK | 0o755) }
func chardev(major, minor uint32) *spec {
	s := mk(unix.S_IFCHR | 0o600)
	s.st.Rdev = unix.Mkdev(major, minor)
	return s
}

// whiteout is overlay's whiteout; all whiteouts share one inode.
func whiteout() *spec {
	s := chardev(0, 0)
	s.st.Mode = unix.S_IFCHR
	s.st.Ino, s.st.Nlink = 99999, 7
	return s
}

// opaque is a directory marked opaque="y" in the trusted namespace.
func opaque() *spec { return dir().x("trusted.overlay.opaque", "y") }

func (s *spec) mode(m uint32) *spec { s.st.Mode = s.st.Mode&unix.S_IFMT | m; return s }
func (s *spec) owner(uid, gid uint32) *spec {
	s.st.UID, s.st.GID = uid, gid
	return s
}
func (s *spec) mtime(ns int64) *spec { s.st.MtimeNS = ns; return s }
func (s *spec) x(name, value string) *spec {
	s.xattrs = append(s.xattrs, attest.Xattr{Name: name, Value: []byte(value)})
	return s
}
func (s *spec) fail(op string, err error) *spec {
	if s.faults == nil {
		s.faults = map[string]error{}
	}
	s.faults[op] = err
	return s
}
func (s *spec) mount(id uint64) *spec { s.st.MountID = id; return s }
func (s *spec) link(to string) *spec  { s.linkTo = to; return s }
func (s *spec) noMountID() *spec      { s.st.HasMountID = false; return s }
func (s *spec) dev(d uint64) *spec    { s.st.Dev = d; return s }
func (s *spec) clone() *spec          { c := *s; return &c }
func (s *spec) isDir() bool           { return s.st.Mode&unix.S_IFMT == unix.S_IFDIR }

// fnode is a node of a fixture layer.
type fnode struct {
	spec     *spec
	children map[string]*fnode
	log      *[]string // digests taken, for tests that count hashing
	path     string
}

// build turns f into a tree and returns its root.
func (f fx) build(t testing.TB) *fnode {
	t.Helper()
	var log []string
	nodes := map[string]*fnode{}
	var get func(p string) *fnode
	get = func(p string) *fnode {
		if n := nodes[p]; n != nil {
			return n
		}
		s := f[p]
		if s == nil {
			s = dir()
		}
		n := &fnode{spec: s.clone(), path: p, log: &log}
		nodes[p] = n
		if p != "." {
			parent := get(path.Dir(p))
			if !parent.spec.isDir() {
				t.Fatalf("fixture: parent of %q is not a directory", p)
			}
			if parent.children == nil {
				parent.children = map[string]*fnode{}
			}
			parent.children[path.Base(p)] = n
		}
		return n
	}
	paths := make([]string, 0, len(f))
	for p := range f {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	root := get(".")
	next := uint64(100)
	for _, p := range paths {
		n := get(p)
		if n.spec.st.Ino == 0 {
			next++
			n.spec.st.Ino = next
		}
	}
	for _, p := range paths {
		if to := f[p].linkTo; to != "" {
			target := nodes[to]
			if target == nil {
				t.Fatalf("fixture: %q links to missing %q", p, to)
			}
			n := nodes[p]
			n.spec.st.Ino = target.spec.st.Ino
			target.spec.st.Nlink++
			n.spec.st.Nlink = target.spec.st.Nlink
		}
	}
	return root
}

func (n *fnode) fault(op string) error { return n.spec.faults[op] }

func (n *fnode) child(name string) (*fnode, error) {
	c := n.children[name]
	if c == nil {
		return nil, fmt.Errorf("fixture lstat %q: %w", name, unix.ENOENT)
	}
	return c, nil
}

func (n *fnode) lstat(name string) (linux.Stat, error) {
	if name == "" {
		return n.spec.st, n.fault("lstat")
	}
	c, err := n.child(name)
	if err != nil {
		return linux.Stat{}, err
	}
	return c.spec.st, c.fault("lstat")
}

func (n *fnode) names(limit int) ([]string, error) {
	if err := n.fault("names"); err != nil {
		return nil, err
	}
	var names []string
	for name := range n.children {
		names = append(names, name)
	}
	// Unsorted on purpose: the reader must sort.
	slices.Sort(names)
	slices.Reverse(names)
	if limit > 0 && len(names) > limit+1 {
		names = names[:limit+1]
	}
	return names, nil
}

func (n *fnode) open(name string, want linux.Stat) (node, error) {
	c, err := n.child(name)
	if err != nil {
		return nil, err
	}
	if err := c.fault("open"); err != nil {
		return nil, err
	}
	got := c.spec.st
	if !sameFile(got, want) || !c.spec.isDir() && !sameContentStat(got, want) {
		return nil, errSwapped
	}
	return c, nil
}

func (n *fnode) xattrs() ([]attest.Xattr, error) {
	return slices.Clone(n.spec.xattrs), n.fault("xattrs")
}

func (n *fnode) readlink() (string, error) { return n.spec.target, n.fault("readlink") }

func (n *fnode) digest(deadline time.Time, _ bool) ([]byte, error) {
	if err := n.fault("digest"); err != nil {
		return nil, err
	}
	if !deadline.IsZero() && time.Now().After(deadline) {
		return nil, errTimeUp
	}
	*n.log = append(*n.log, n.path)
	sum := sha256.Sum256([]byte(n.spec.data))
	return sum[:], nil
}

func (n *fnode) close() {}

// readFx reads upper against lower (either may be nil: a missing root).
func readFx(t testing.TB, upper, lower fx, opt ReadOptions) (*Changes, error) {
	t.Helper()
	opt, err := opt.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var u, l node
	if upper != nil {
		u = upper.build(t)
	}
	if lower != nil {
		l = lower.build(t)
	}
	return readLayers(u, l, opt)
}

// summary renders entries as "change path" lines and reasons as
// "!code path" lines, the form the tests compare.
func summary(ch *Changes) []string {
	var out []string
	for _, e := range ch.Entries {
		out = append(out, string(e.Change)+" "+string(e.Path))
	}
	for _, r := range ch.Incomplete {
		out = append(out, "!"+string(r.Code)+" "+string(r.Path))
	}
	return out
}

func lines(s ...string) []string { return s }

func equalLines(t testing.TB, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("got:\n\t%s\nwant:\n\t%s", strings.Join(quoteAll(got), "\n\t"), strings.Join(quoteAll(want), "\n\t"))
	}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
