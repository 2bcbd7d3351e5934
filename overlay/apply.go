package overlay

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// ErrNotAttested means the upper layer does not hold what the statement says
// (size, digest or type of a file to be copied, or a hard-link source).
// Apply refuses such an entry and replaces nothing with it; running Apply
// again does not help, since the upper layer is not what was attested.
var ErrNotAttested = errors.New("upper layer differs from the statement")

// ApplyError is the error Apply returns: the entry path (or the directory
// being finished) and the operation that failed. Unless Err wraps
// ErrNotAttested, the workspace is in a state that running Apply again with
// the same entries completes.
type ApplyError struct {
	Path attest.Path
	Op   string // e.g. "rename", "verify", "unlink", "setxattr"
	Err  error
}

func (e *ApplyError) Error() string {
	return fmt.Sprintf("apply: %s %q: %v", e.Op, string(e.Path), e.Err)
}

func (e *ApplyError) Unwrap() error { return e.Err }

// ApplyOptions tunes Apply. The zero value is ready to use.
type ApplyOptions struct {
	// Progress, when set, is called before each change Apply makes to the
	// workspace, with the operation ("mkdir", "write", "link", "rename",
	// "unlink", "rmdir", "chown", "chmod", "setxattr", "removexattr",
	// "utimens", ...) and the path it serves.
	Progress func(op string, p attest.Path)

	// Workspace, if set, is the workspace root as the caller opened and
	// identified it: Apply works beneath it and never resolves the
	// workspace path, which then only names it.
	Workspace *os.File

	// Partial says that parts of the upper layer were not examined (the
	// statement is incomplete for them): Apply then never reaches past
	// the entries, in particular not to unlisted upper names of a listed
	// file's inode, and a deleted directory that still holds unlisted
	// entries is left, with the new file of its type change (see Left).
	Partial bool
	// Resume says an earlier Apply of the same entries may have stopped
	// part way: a new file is then written through its temporary name,
	// which removes what that run left there, rather than linked at its
	// own name directly.
	Resume bool
	// Left, when set, is called for each entry Partial made Apply leave
	// as it is, with the reason.
	Left func(p attest.Path, why string)
	// Stop, when set, is asked before each change Apply makes; an error
	// from it stops Apply there (wrapped in *ApplyError), leaving the
	// workspace as a crash at that point would: running Apply again with
	// the same entries finishes the job.
	Stop func() error

	// crashAt, in tests, is asked before each change; when it returns
	// true Apply stops at once as if the process had died there, leaving
	// temporary files in place.
	crashAt func(step int) bool
}

// applyTempPrefix starts the name of every temporary file Apply makes in
// the workspace.
const applyTempPrefix = ".layerseal-tmp-"

// errApplyCrash is returned when ApplyOptions.crashAt stops a run.
var errApplyCrash = errors.New("simulated crash")

// Apply makes the workspace (the overlay's lower layer, no longer mounted)
// equal to the merged view the entries describe, reading new file contents
// from the upper layer, which it never modifies.
//
// entries are a statement's entries: unique paths, each Deleted entry for
// every path removed (those beneath a deleted or replaced directory
// included). Apply removes deleted paths deepest first; creates
// directories; writes every added or modified regular file from the upper
// layer into a temporary file beside its target, refusing it with
// ErrNotAttested unless its size and SHA-256 match the entry; recreates
// symlinks, FIFOs, sockets and devices; sets owner, mode, the exact set of
// extended attributes (overlay-private trusted.overlay.* names already
// present are left alone; user.overlay.* names are user data) and mtime;
// and puts each result at its target atomically: renamed over what is
// there, or, for an added file whose name is free, linked there from
// O_TMPFILE (a resumed run renames every file, see Resume). Files sharing
// an inode in the merged view (State.Link) end up as hard links of one inode; an unchanged file they
// link to keeps its other workspace names (links overlayfs split off on
// copy-up), since those are not listed. Directory mtimes are set
// last, deepest first; directories Apply only had to write into get back
// the mtime the upper layer records for them.
//
// Every operation is relative to a descriptor of the workspace root and
// refuses symlinks and mount crossings in any path component. Each step can
// be repeated, so after a failure or crash running Apply again with the same
// entries finishes the job and removes the temporary files the failed run
// left (named ".layerseal-tmp-" plus a tag of the entry set). On success the
// workspace's filesystem has been synced.
func Apply(upper, workspace string, entries []attest.Entry, opt ApplyOptions) error {
	a := &applier{opt: opt, root: -1, upper: -1}
	defer a.close()
	var err error
	if opt.Workspace != nil {
		a.root, err = linux.OpenBeneath(int(opt.Workspace.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	} else {
		a.root, err = linux.Openat(unix.AT_FDCWD, workspace, unix.O_PATH|unix.O_DIRECTORY)
	}
	if err != nil {
		return &ApplyError{Path: attest.Root, Op: "open workspace", Err: err}
	}
	if a.upper, err = linux.Openat(unix.AT_FDCWD, upper, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		return &ApplyError{Path: attest.Root, Op: "open upper layer", Err: err}
	}
	if err := a.plan(entries); err != nil {
		return err
	}
	for _, step := range []func() error{a.deleteAll, a.createAll, a.linkAll, a.finishDirs} {
		if err := step(); err != nil {
			return err
		}
	}
	fd, err := linux.Openat(a.root, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err == nil {
		err = linux.Syncfs(fd)
		unix.Close(fd)
	}
	if err != nil {
		return &ApplyError{Path: attest.Root, Op: "syncfs", Err: err}
	}
	return nil
}

// applier holds one run of Apply.
type applier struct {
	opt   ApplyOptions
	root  int // O_PATH descriptor of the workspace root
	upper int // O_PATH descriptor of the upper layer's root

	entries []attest.Entry      // sorted, root first
	index   map[attest.Path]int // path → position in entries
	tag     string              // names this entry set's temporary files

	groups    []applyGroup          // hard-link groups, by anchor path
	restore   []attest.Path         // unchanged directories Apply writes into
	restoreNS map[attest.Path]int64 // their mtimes before this run (fallback)
	written   map[attest.Path]bool  // regular files written from the upper layer
	left      map[attest.Path]bool  // entries left as they are (Partial)

	// ahead, while createFiles runs, holds the upper files opened ahead.
	ahead *readAhead

	// mu guards what the goroutines of createFiles share: steps (and
	// the calls to the options' Stop, Progress and crashAt, which are
	// thereby never concurrent), written, and the first failure.
	mu     sync.Mutex
	steps  int
	halted error // the first failure of createFiles; later steps refuse
}

// errHalted refuses a step after another goroutine of createFiles failed.
var errHalted = errors.New("stopped after another file failed")

// applyGroup is one inode of the merged view with several names.
type applyGroup struct {
	anchor  attest.Path   // State.Link of the members: the smallest name
	members []attest.Path // every other name, listed or not, sorted
}

func (a *applier) close() {
	for _, fd := range []int{a.root, a.upper} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// applyLess orders paths by bytes with the root first.
func applyLess(p, q attest.Path) bool {
	if p == attest.Root || q == attest.Root {
		return p == attest.Root && q != attest.Root
	}
	return p < q
}

// applySplit returns the parent directory and last component of p.
func applySplit(p attest.Path) (attest.Path, string) {
	i := strings.LastIndexByte(string(p), '/')
	if i < 0 {
		return attest.Root, string(p)
	}
	return p[:i], string(p[i+1:])
}

// applyCheckState checks what Apply needs of a New state.
func applyCheckState(p attest.Path, s *attest.State) error {
	switch s.Type {
	case attest.File, attest.Dir, attest.Symlink, attest.FIFO, attest.Socket, attest.CharDev, attest.BlockDev:
	default:
		return fmt.Errorf("unknown type %q", s.Type)
	}
	if s.Mode&^07777 != 0 {
		return fmt.Errorf("mode %#o has bits beyond 07777", s.Mode)
	}
	if p == attest.Root && s.Type != attest.Dir {
		return fmt.Errorf("root is a %s, not a directory", s.Type)
	}
	if s.Type == attest.Symlink && (s.Target == "" || strings.IndexByte(string(s.Target), 0) >= 0) {
		return fmt.Errorf("bad symlink target %q", string(s.Target))
	}
	if s.SHA256 != nil && len(s.SHA256) != sha256.Size {
		return fmt.Errorf("sha256 of %d bytes", len(s.SHA256))
	}
	if s.Link != "" {
		if s.Type != attest.File {
			return fmt.Errorf("link %q on a %s", string(s.Link), s.Type)
		}
		if err := s.Link.Valid(); err != nil || s.Link == attest.Root || applyLess(p, s.Link) {
			return fmt.Errorf("bad link %q: must be a path not after %q", string(s.Link), string(p))
		}
	}
	return nil
}

// isLinker reports whether e must become a hard link to another path.
func isLinker(e *attest.Entry) bool {
	return e.New != nil && e.New.Link != "" && e.New.Link != e.Path
}

// plan validates the entries and works out, before anything changes, the
// hard-link groups, the directories whose mtime must be restored and the
// sizes and types of the upper files to copy.
func (a *applier) plan(in []attest.Entry) error {
	a.entries = append([]attest.Entry(nil), in...)
	sort.Slice(a.entries, func(i, j int) bool { return applyLess(a.entries[i].Path, a.entries[j].Path) })
	a.index = make(map[attest.Path]int, len(a.entries))
	a.written = map[attest.Path]bool{}
	a.left = map[attest.Path]bool{}
	tag := sha256.New()
	for i := range a.entries {
		e := &a.entries[i]
		bad := func(err error) error { return &ApplyError{Path: e.Path, Op: "check entry", Err: err} }
		if err := e.Path.Valid(); err != nil {
			return bad(err)
		}
		if i > 0 && a.entries[i-1].Path == e.Path {
			return bad(errors.New("path listed twice"))
		}
		a.index[e.Path] = i
		switch e.Change {
		case attest.Deleted:
			if e.New != nil {
				return bad(errors.New("deleted entry with a new state"))
			}
			if e.Path == attest.Root {
				return bad(errors.New("the root cannot be deleted"))
			}
		case attest.Added, attest.Modified, attest.Metadata, attest.Replaced, attest.TypeChange:
			if e.New == nil {
				return bad(fmt.Errorf("%s entry without a new state", e.Change))
			}
			if err := applyCheckState(e.Path, e.New); err != nil {
				return bad(err)
			}
			if e.Change == attest.Replaced && e.New.Type != attest.Dir {
				return bad(fmt.Errorf("replaced entry is a %s, not a directory", e.New.Type))
			}
			if e.Change == attest.TypeChange && e.Old == nil {
				return bad(errors.New("type change without an old state"))
			}
		default:
			return bad(fmt.Errorf("unknown change %q", e.Change))
		}
		fmt.Fprintf(tag, "%d:%s%s\x00", len(e.Path), e.Path, e.Change)
	}
	a.tag = hex.EncodeToString(tag.Sum(nil)[:6])

	// Check the upper files to copy: type and size (digests are checked
	// while copying). Each is stated in its upper directory, opened
	// beneath the upper root once for the files in it.
	var updir upperDir
	defer updir.close()
	for i := range a.entries {
		e := &a.entries[i]
		if e.New == nil || e.New.Type != attest.File || isLinker(e) {
			continue
		}
		st, err := updir.stat(a, e.Path)
		if err != nil {
			return &ApplyError{Path: e.Path, Op: "stat upper", Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.New.Size {
			return &ApplyError{Path: e.Path, Op: "verify", Err: fmt.Errorf("%w: upper file has mode %#o and size %d, statement says a file of %d bytes", ErrNotAttested, st.Mode, st.Size, e.New.Size)}
		}
	}
	if err := a.planGroups(); err != nil {
		return err
	}

	// Directories Apply writes into that are not entries themselves keep
	// the merged view's (= the upper layer's) mtime.
	seen := map[attest.Path]bool{}
	addParent := func(p attest.Path) {
		if p == attest.Root {
			return
		}
		dir, _ := applySplit(p)
		if _, listed := a.index[dir]; !listed && !seen[dir] {
			seen[dir] = true
			a.restore = append(a.restore, dir)
		}
	}
	for i := range a.entries {
		addParent(a.entries[i].Path)
	}
	for _, g := range a.groups {
		for _, m := range g.members {
			addParent(m)
		}
	}
	a.restoreNS = map[attest.Path]int64{}
	for _, dir := range a.restore {
		if st, err := a.stat(dir); err == nil {
			a.restoreNS[dir] = st.MtimeNS
		}
	}
	return nil
}

// planGroups collects the hard-link groups: the listed members of each,
// plus unlisted upper names of the same inode (unchanged files the agent
// linked to), found by walking the upper layer only when the upper inode
// has more names than the entries list.
func (a *applier) planGroups() error {
	byAnchor := map[attest.Path][]attest.Path{}
	var anchors []attest.Path
	for i := range a.entries {
		e := &a.entries[i]
		if e.New == nil || e.New.Link == "" {
			continue
		}
		l := e.New.Link
		if _, ok := byAnchor[l]; !ok {
			byAnchor[l] = nil
			anchors = append(anchors, l)
		}
		if l != e.Path {
			byAnchor[l] = append(byAnchor[l], e.Path)
		}
	}
	sort.Slice(anchors, func(i, j int) bool { return anchors[i] < anchors[j] })
	var inodes map[[2]uint64][]attest.Path
	for _, l := range anchors {
		if i, ok := a.index[l]; ok {
			le := &a.entries[i]
			if le.New == nil || le.New.Type != attest.File || le.New.Link != l {
				return &ApplyError{Path: l, Op: "check entry", Err: errors.New("hard-link anchor is not a regular file linked to itself")}
			}
		}
		st, err := a.upperStat(l)
		if err != nil {
			return &ApplyError{Path: l, Op: "stat upper", Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return &ApplyError{Path: l, Op: "verify", Err: fmt.Errorf("%w: hard-link anchor has mode %#o in the upper layer", ErrNotAttested, st.Mode)}
		}
		members := byAnchor[l]
		// Unlisted upper names of the inode are unchanged files the
		// reader examined, unless parts of the upper layer were not
		// examined: then they may be anything, and are left alone.
		if int(st.Nlink) > len(members)+1 && !a.opt.Partial {
			if inodes == nil {
				inodes = map[[2]uint64][]attest.Path{}
				if err := a.walkUpper(a.upper, attest.Root, inodes); err != nil {
					return err
				}
			}
			for _, p := range inodes[[2]uint64{st.Dev, st.Ino}] {
				if _, listed := a.index[p]; !listed {
					members = append(members, p)
				}
			}
		}
		sort.Slice(members, func(i, j int) bool { return members[i] < members[j] })
		if len(members) > 0 {
			a.groups = append(a.groups, applyGroup{anchor: l, members: members})
		}
	}
	return nil
}

// walkUpper records the names of every regular file with several links in
// the upper directory dirfd (path p).
func (a *applier) walkUpper(dirfd int, p attest.Path, inodes map[[2]uint64][]attest.Path) error {
	fd, err := linux.OpenBeneath(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return &ApplyError{Path: p, Op: "open upper", Err: err}
	}
	defer unix.Close(fd)
	names, err := linux.ReadDirNames(fd)
	if err != nil {
		return &ApplyError{Path: p, Op: "read upper", Err: err}
	}
	for _, name := range names {
		child := attest.Path(name)
		if p != attest.Root {
			child = p + "/" + child
		}
		st, err := linux.Lstat(fd, name)
		if err != nil {
			return &ApplyError{Path: child, Op: "stat upper", Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if st.Nlink > 1 {
				k := [2]uint64{st.Dev, st.Ino}
				inodes[k] = append(inodes[k], child)
			}
		case unix.S_IFDIR:
			sub, err := linux.OpenBeneath(fd, name, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				return &ApplyError{Path: child, Op: "open upper", Err: err}
			}
			err = a.walkUpper(sub, child, inodes)
			unix.Close(sub)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// upperDir is the upper directory plan opened last, kept for the next
// file in it.
type upperDir struct {
	dir  attest.Path
	fd   int
	open bool
}

// stat stats p (not the root) in the upper layer without following
// symlinks in any component.
func (d *upperDir) stat(a *applier, p attest.Path) (linux.Stat, error) {
	dir, base := applySplit(p)
	if !d.open || d.dir != dir {
		d.close()
		fd, err := linux.OpenBeneath(a.upper, string(dir), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return linux.Stat{}, err
		}
		d.dir, d.fd, d.open = dir, fd, true
	}
	return linux.Lstat(d.fd, base)
}

func (d *upperDir) close() {
	if d.open {
		unix.Close(d.fd)
	}
	d.open = false
}

// upperStat stats p in the upper layer without following symlinks.
func (a *applier) upperStat(p attest.Path) (linux.Stat, error) {
	fd, err := linux.OpenBeneath(a.upper, string(p), unix.O_PATH)
	if err != nil {
		return linux.Stat{}, err
	}
	defer unix.Close(fd)
	return linux.Lstat(fd, "")
}

// stat stats p in the workspace without following symlinks.
func (a *applier) stat(p attest.Path) (linux.Stat, error) {
	fd, err := linux.OpenBeneath(a.root, string(p), unix.O_PATH)
	if err != nil {
		return linux.Stat{}, err
	}
	defer unix.Close(fd)
	return linux.Lstat(fd, "")
}

// step announces one change to the workspace; it fails only when Stop
// says so or a test simulates a crash there.
func (a *applier) step(op string, p attest.Path) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.halted != nil {
		return &ApplyError{Path: p, Op: op, Err: errHalted}
	}
	a.steps++
	var err error
	if a.opt.Stop != nil {
		err = a.opt.Stop()
	}
	if err == nil && a.opt.Progress != nil {
		a.opt.Progress(op, p)
	}
	if err == nil && a.opt.crashAt != nil && a.opt.crashAt(a.steps) {
		err = errApplyCrash
	}
	if err != nil {
		a.halted = &ApplyError{Path: p, Op: op, Err: err}
		return a.halted
	}
	return nil
}

// halt records err as the failure of createFiles unless one came first.
func (a *applier) halt(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.halted == nil {
		a.halted = err
	}
}

// openParent opens the workspace directory holding p (O_PATH) and returns
// it with p's last component. A parent that is missing or not a
// directory is reported as unix.ENOENT or unix.ENOTDIR, a symlink in any
// component as unix.ELOOP.
func (a *applier) openParent(p attest.Path) (int, string, error) {
	dir, base := applySplit(p)
	fd, err := linux.OpenBeneath(a.root, string(dir), unix.O_PATH)
	if err != nil {
		return -1, base, err
	}
	st, err := linux.Lstat(fd, "")
	if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err = unix.ENOTDIR
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			err = unix.ELOOP
		}
		err = &os.PathError{Op: "open directory", Path: string(dir), Err: err}
	}
	if err != nil {
		unix.Close(fd)
		return -1, base, err
	}
	return fd, base, nil
}

// parentDir is the workspace directory a goroutine of apply opened last
// (with openParent), kept for the next entry in it: entries come in path
// order, and apply changes no directory while it creates files in them.
type parentDir struct {
	dir  attest.Path
	fd   int
	open bool
}

// get returns the directory holding p, opened or kept, and p's last
// component. The descriptor stays p's parent's until close.
func (d *parentDir) get(a *applier, p attest.Path) (int, string, error) {
	dir, base := applySplit(p)
	if d.open && d.dir == dir {
		return d.fd, base, nil
	}
	d.close()
	fd, base, err := a.openParent(p)
	if err != nil {
		return -1, base, err
	}
	d.dir, d.fd, d.open = dir, fd, true
	return fd, base, nil
}

func (d *parentDir) close() {
	if d.open {
		unix.Close(d.fd)
	}
	d.open = false
}

// tempName is the temporary name for entry i (or for the hard-link group
// member m when i < 0): fixed for a given entry set, so a re-run finds and
// replaces what a failed run left.
func (a *applier) tempName(i int, m attest.Path) string {
	if i >= 0 {
		return applyTempPrefix + a.tag + "-" + strconv.Itoa(i)
	}
	sum := sha256.Sum256([]byte(m))
	return applyTempPrefix + a.tag + "-l" + hex.EncodeToString(sum[:6])
}

// clearTemp removes a temporary name left by an earlier run.
func (a *applier) clearTemp(dirfd int, tmp string, p attest.Path) error {
	if _, err := linux.Lstat(dirfd, tmp); errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err := a.step("unlink", p); err != nil {
		return err
	}
	if err := linux.Unlinkat(dirfd, tmp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return &ApplyError{Path: p, Op: "unlink", Err: err}
	}
	return nil
}

// dropTemp removes a temporary name after a failure (not after a
// simulated crash, which must leave it like a real one would).
func (a *applier) dropTemp(dirfd int, tmp string, err error) {
	if !errors.Is(err, errApplyCrash) {
		linux.Unlinkat(dirfd, tmp, 0)
	}
}

// deleteAll removes every deleted path and the old file of every type
// change, deepest first. A path already gone counts as removed.
func (a *applier) deleteAll() error {
	for i := len(a.entries) - 1; i >= 0; i-- {
		e := &a.entries[i]
		if e.Change != attest.Deleted && e.Change != attest.TypeChange {
			continue
		}
		if err := a.remove(e); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) remove(e *attest.Entry) error {
	dirfd, base, err := a.openParent(e.Path)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "open parent", Err: err}
	}
	defer unix.Close(dirfd)
	st, err := linux.Lstat(dirfd, base)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "stat", Err: err}
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if e.Change == attest.TypeChange && st.Mode&unix.S_IFMT == typeBits(e.New.Type) {
		return nil // the new file is already there (an earlier run)
	}
	op, flags := "unlink", 0
	if isDir {
		// Only an empty directory is removed: everything it held is
		// listed as deleted and removed before it, deepest first. One
		// still holding entries holds what the statement does not list.
		op, flags = "rmdir", unix.AT_REMOVEDIR
	}
	if err := a.step(op, e.Path); err != nil {
		return err
	}
	err = linux.Unlinkat(dirfd, base, flags)
	if isDir && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) {
		if !a.opt.Partial {
			return &ApplyError{Path: e.Path, Op: op, Err: fmt.Errorf("%w: the directory holds entries the statement does not list as deleted", err)}
		}
		a.leave(e.Path, "the directory holds entries that were not examined")
		return nil
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &ApplyError{Path: e.Path, Op: op, Err: err}
	}
	return nil
}

// leave records that entry p is left as it is.
func (a *applier) leave(p attest.Path, why string) {
	a.left[p] = true
	if a.opt.Left != nil {
		a.opt.Left(p, why)
	}
}

// createAll creates or rewrites every entry with a new state except hard
// links to another path, in path order so parents come first. Directory
// metadata waits for finishDirs.
func (a *applier) createAll() error {
	var files []int
	var parents parentDir
	defer parents.close()
	for i := range a.entries {
		e := &a.entries[i]
		if e.New == nil || isLinker(e) || a.left[e.Path] {
			continue
		}
		if e.New.Type == attest.File && e.Path != attest.Root {
			files = append(files, i)
			continue
		}
		if err := a.create(i, e, &parents); err != nil {
			return err
		}
	}
	return a.createFiles(files)
}

// createFiles writes the regular files of entries idx, on as many
// goroutines as there are cores (at least two: much of a small file's
// cost is waiting in system calls), while a read-ahead asks the kernel
// for the next files' contents (see readAhead). Every directory exists by then and
// each file is written under its own temporary name and renamed, so they
// are independent. The first failure stops the others before their next
// change, and is what createFiles returns.
func (a *applier) createFiles(idx []int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	ahead := newReadAhead()
	a.ahead = ahead
	var aheadDone sync.WaitGroup
	aheadDone.Go(func() { ahead.run(a, idx) })
	defer func() {
		ahead.stop()
		aheadDone.Wait()
		ahead.closeUnclaimed()
		a.ahead = nil
	}()
	for range min(len(idx), max(2, runtime.GOMAXPROCS(0))) {
		wg.Go(func() {
			var parents parentDir
			defer parents.close()
			for {
				k := next.Add(1) - 1
				if k >= int64(len(idx)) {
					return
				}
				ahead.take(int(k))
				if err := a.create(idx[k], &a.entries[idx[k]], &parents); err != nil {
					a.halt(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return a.halted
}

// create makes e's path in the workspace (a regular file under a
// temporary name, then renamed), with parents holding the last parent
// directory opened.
func (a *applier) create(i int, e *attest.Entry, parents *parentDir) error {
	if e.Path == attest.Root {
		return nil // the root exists; its metadata is set in finishDirs
	}
	dirfd, base, err := parents.get(a, e.Path)
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "open parent", Err: err}
	}
	if e.New.Type == attest.File && e.Change != attest.Metadata {
		return a.writeFile(i, e, dirfd, base) // replaces whatever is there
	}
	st, err := linux.Lstat(dirfd, base)
	exists := err == nil
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &ApplyError{Path: e.Path, Op: "stat", Err: err}
	}
	switch e.New.Type {
	case attest.Dir:
		if exists {
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return &ApplyError{Path: e.Path, Op: "mkdir", Err: fmt.Errorf("a file of mode %#o is in the way", st.Mode)}
			}
			return nil
		}
		if err := a.step("mkdir", e.Path); err != nil {
			return err
		}
		if err := linux.Mkdirat(dirfd, base, 0o700); err != nil {
			return &ApplyError{Path: e.Path, Op: "mkdir", Err: err}
		}
		return nil
	case attest.File:
		if e.Change == attest.Metadata && exists && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink == 1 {
			return a.setInPlace(dirfd, base, e, st)
		}
		return a.writeFile(i, e, dirfd, base)
	default:
		return a.makeNode(i, e, dirfd, base)
	}
}

// setInPlace changes only the metadata of the regular file base in dirfd,
// which has no other name (so no other path shares the change).
func (a *applier) setInPlace(dirfd int, base string, e *attest.Entry, st linux.Stat) error {
	fd, err := linux.Openat(dirfd, base, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "open", Err: err}
	}
	defer unix.Close(fd)
	now, err := linux.Lstat(fd, "")
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "stat", Err: err}
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return &ApplyError{Path: e.Path, Op: "open", Err: errors.New("file replaced while being opened")}
	}
	return a.setMeta(fd, e.Path, e.New)
}

// writeFile copies e's upper file into a temporary file beside the target,
// checks size and digest, sets the metadata and renames it over the target.
func (a *applier) writeFile(i int, e *attest.Entry, dirfd int, base string) error {
	src := a.ahead.claim(i)
	if src < 0 {
		var err error
		src, err = linux.OpenBeneath(a.upper, string(e.Path), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			return &ApplyError{Path: e.Path, Op: "open upper", Err: err}
		}
	}
	defer unix.Close(src)
	st, err := linux.Lstat(src, "")
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "stat upper", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.New.Size {
		return &ApplyError{Path: e.Path, Op: "verify", Err: fmt.Errorf("%w: upper file has mode %#o and size %d, statement says a file of %d bytes", ErrNotAttested, st.Mode, st.Size, e.New.Size)}
	}
	tmp := a.tempName(i, e.Path)
	// A new file is linked from O_TMPFILE at its own name when nothing is
	// there: one directory entry made instead of a temporary one made,
	// renamed and removed. Anything already there is replaced through
	// the temporary name as usual, and so is every file of a resumed run,
	// which may find its temporary name left by the run it resumes.
	direct := ""
	if e.Change == attest.Added && !a.opt.Resume {
		direct = base
	}
	placed, err := a.writeTemp(dirfd, tmp, direct, e.Path, func(dst int) error {
		var h hash.Hash
		if e.New.SHA256 != nil {
			h = sha256.New()
		}
		if err := applyCopy(dst, src, int64(e.New.Size), h); err != nil {
			return &ApplyError{Path: e.Path, Op: "copy", Err: err}
		}
		if h != nil {
			if sum := h.Sum(nil); !bytes.Equal(sum, e.New.SHA256) {
				return &ApplyError{Path: e.Path, Op: "verify", Err: fmt.Errorf("%w: upper file has sha256 %x, statement says %x", ErrNotAttested, sum, e.New.SHA256)}
			}
		}
		return a.setMeta(dst, e.Path, e.New)
	})
	if err != nil {
		return err
	}
	if !placed {
		if err := a.rename(dirfd, tmp, base, e.Path); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.written[e.Path] = true
	a.mu.Unlock()
	return nil
}

// writeTemp makes the temporary regular file tmp in dirfd (replacing one
// left by an earlier run) with contents and metadata written by fill.
// Where the filesystem has O_TMPFILE the file gets its name only after
// fill succeeds, so a refused or failed file never shows in the directory;
// there, when direct is not empty and nothing has that name, the file is
// linked at direct instead and placed is true.
func (a *applier) writeTemp(dirfd int, tmp, direct string, p attest.Path, fill func(fd int) error) (placed bool, err error) {
	if err := a.step("write", p); err != nil {
		return false, err
	}
	dst, err := linux.Openat(dirfd, ".", unix.O_WRONLY|unix.O_TMPFILE)
	if err == nil {
		defer unix.Close(dst)
		if err := fill(dst); err != nil {
			return false, err
		}
		if err := a.step("link", p); err != nil {
			return false, err
		}
		if direct != "" {
			err := linux.LinkFD(dst, dirfd, direct)
			if err == nil {
				return true, nil
			}
			if !errors.Is(err, unix.EEXIST) {
				return false, &ApplyError{Path: p, Op: "link", Err: err}
			}
		}
		err := linux.LinkFD(dst, dirfd, tmp)
		if errors.Is(err, unix.EEXIST) { // left by an earlier run
			if err = a.clearTemp(dirfd, tmp, p); err != nil {
				return false, err
			}
			err = linux.LinkFD(dst, dirfd, tmp)
		}
		if err != nil {
			return false, &ApplyError{Path: p, Op: "link", Err: err}
		}
		return false, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return false, &ApplyError{Path: p, Op: "create", Err: err}
	}
	if err := a.clearTemp(dirfd, tmp, p); err != nil {
		return false, err
	}
	dst, err = linux.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW)
	if err != nil {
		return false, &ApplyError{Path: p, Op: "create", Err: err}
	}
	err = fill(dst)
	unix.Close(dst)
	if err != nil {
		a.dropTemp(dirfd, tmp, err)
	}
	return false, err
}

// rename moves tmp over base in dirfd.
func (a *applier) rename(dirfd int, tmp, base string, p attest.Path) error {
	err := a.step("rename", p)
	if err == nil {
		if err = linux.Renameat2(dirfd, tmp, dirfd, base, 0); err != nil {
			err = &ApplyError{Path: p, Op: "rename", Err: err}
		}
	}
	if err != nil {
		a.dropTemp(dirfd, tmp, err)
	}
	return err
}

// makeNode recreates a symlink, FIFO, socket or device beside its target
// and renames it over the target.
func (a *applier) makeNode(i int, e *attest.Entry, dirfd int, base string) error {
	tmp := a.tempName(i, e.Path)
	if err := a.clearTemp(dirfd, tmp, e.Path); err != nil {
		return err
	}
	var err error
	if e.New.Type == attest.Symlink {
		if err = a.step("symlink", e.Path); err != nil {
			return err
		}
		err = linux.Symlinkat(string(e.New.Target), dirfd, tmp)
	} else {
		if err = a.step("mknod", e.Path); err != nil {
			return err
		}
		var rdev uint64
		if e.New.Type == attest.CharDev || e.New.Type == attest.BlockDev {
			rdev = e.New.Rdev
		}
		err = linux.Mknodat(dirfd, tmp, typeBits(e.New.Type)|0o600, rdev)
	}
	if err != nil {
		return &ApplyError{Path: e.Path, Op: "create", Err: err}
	}
	fd, err := linux.Openat(dirfd, tmp, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		a.dropTemp(dirfd, tmp, err)
		return &ApplyError{Path: e.Path, Op: "open", Err: err}
	}
	err = a.setMeta(fd, e.Path, e.New)
	unix.Close(fd)
	if err != nil {
		a.dropTemp(dirfd, tmp, err)
		return err
	}
	return a.rename(dirfd, tmp, base, e.Path)
}

// setMeta gives the file open at fd (any descriptor, O_PATH included)
// s's owner, mode (after the owner: chown clears setuid), exact set of
// extended attributes, and mtime (last; the atime is left alone).
func (a *applier) setMeta(fd int, p attest.Path, s *attest.State) error {
	if err := a.step("chown", p); err != nil {
		return err
	}
	if err := linux.Fchownat(fd, "", s.UID, s.GID); err != nil {
		return &ApplyError{Path: p, Op: "chown", Err: err}
	}
	if s.Type != attest.Symlink {
		if err := a.step("chmod", p); err != nil {
			return err
		}
		if err := linux.Fchmodat(fd, "", s.Mode); err != nil {
			return &ApplyError{Path: p, Op: "chmod", Err: err}
		}
	}
	if err := a.setXattrs(fd, p, s.Xattrs); err != nil {
		return err
	}
	if err := a.step("utimens", p); err != nil {
		return err
	}
	if err := linux.Utimensat(fd, "", linux.UtimeOmit, s.MtimeNS); err != nil {
		return &ApplyError{Path: p, Op: "utimens", Err: err}
	}
	return nil
}

// applyOverlayPrivate reports whether an attribute name is in the
// namespace a privileged overlay keeps for itself (trusted.overlay.*),
// which the merged view never shows. user.overlay.* names are user data
// there, set and removed exactly like any other.
func applyOverlayPrivate(name string) bool {
	return strings.HasPrefix(name, "trusted.overlay.")
}

// setXattrs makes the extended attributes of the file open at fd exactly
// want (overlay-private names present are left alone).
func (a *applier) setXattrs(fd int, p attest.Path, want []attest.Xattr) error {
	have, err := linux.Listxattr(fd)
	if err != nil {
		return &ApplyError{Path: p, Op: "listxattr", Err: err}
	}
	keep := make(map[string]bool, len(want))
	for _, x := range want {
		keep[x.Name] = true
	}
	for _, name := range have {
		if keep[name] || applyOverlayPrivate(name) {
			continue
		}
		if err := a.step("removexattr", p); err != nil {
			return err
		}
		if err := linux.Removexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return &ApplyError{Path: p, Op: "removexattr", Err: err}
		}
	}
	for _, x := range want {
		if cur, err := linux.Getxattr(fd, x.Name); err == nil && bytes.Equal(cur, x.Value) {
			continue
		}
		if err := a.step("setxattr", p); err != nil {
			return err
		}
		if err := linux.Setxattr(fd, x.Name, x.Value); err != nil {
			return &ApplyError{Path: p, Op: "setxattr", Err: err}
		}
	}
	return nil
}

// finishDirs sets the metadata of every directory entry and restores the
// mtime of the unchanged directories Apply wrote into, deepest first, the
// root last.
func (a *applier) finishDirs() error {
	type dir struct {
		p     attest.Path
		state *attest.State // nil: restore the mtime only
	}
	var dirs []dir
	for i := range a.entries {
		if e := &a.entries[i]; e.New != nil && e.New.Type == attest.Dir {
			dirs = append(dirs, dir{e.Path, e.New})
		}
	}
	for _, p := range a.restore {
		dirs = append(dirs, dir{p, nil})
	}
	sort.Slice(dirs, func(i, j int) bool { return applyLess(dirs[j].p, dirs[i].p) })
	for _, d := range dirs {
		fd, err := linux.OpenBeneath(a.root, string(d.p), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return &ApplyError{Path: d.p, Op: "open", Err: err}
		}
		if d.state != nil {
			err = a.setMeta(fd, d.p, d.state)
		} else {
			err = a.restoreMtime(fd, d.p)
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// restoreMtime gives the unchanged directory p the mtime the upper layer
// holds for it (its copy-up kept the lower one), or failing that the one
// it had when this run started.
func (a *applier) restoreMtime(fd int, p attest.Path) error {
	mtime, ok := a.restoreNS[p]
	// An unlisted directory was examined and found unchanged, unless
	// parts of the upper layer were not examined: then it keeps its own.
	if st, err := a.upperStat(p); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && !a.opt.Partial {
		mtime, ok = st.MtimeNS, true
	}
	if !ok {
		return nil
	}
	if err := a.step("utimens", p); err != nil {
		return err
	}
	if err := linux.Utimensat(fd, "", linux.UtimeOmit, mtime); err != nil {
		return &ApplyError{Path: p, Op: "utimens", Err: err}
	}
	return nil
}
