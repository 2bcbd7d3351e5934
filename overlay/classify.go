package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// reader is one classification of an upper layer against a lower layer.
type reader struct {
	opt     ReadOptions
	private string // "trusted.overlay." or "user.overlay."

	upperRoot, lowerRoot linux.Stat
	noMountID            bool // mounts told apart by st_dev

	entries   []attest.Entry
	reasons   []attest.Reason
	stats     Stats
	pathBytes int64 // bytes of the listed paths
	stopped   bool  // a budget ran out: examine nothing more
	// inOpaque: the directory being walked lies in a replaced (opaque)
	// directory, so no lower directory shows through it: its lower-only
	// children are deleted whether or not it is marked opaque itself.
	inOpaque bool
	// fresh: the subtree being walked changed its context since the
	// previous read (ReadChanged), so none of it is taken from there.
	fresh bool
	// itemizing: an entry of an excluded subtree is being classified
	// (see summarize).
	itemizing bool

	links map[[2]uint64]*linkGroup // upper regular files with nlink > 1
	// sums holds the digests of files with several names, so each inode
	// is hashed once per read whatever its number of names.
	sums map[linkKey]linkSum

	excluded []attest.Excluded // subtrees summarized for opt.Exclude
	resolve  resolver          // the merged view, for symlinks in them

	ahead *hashAhead // large files being hashed beside the walk, if any

	// gitDirs: directories of excluded subtrees, whether each has git's
	// repository layout (gitItemized).
	gitDirs map[attest.Path]bool
}

// linkKey names an inode of one layer; linkSum is its digest and the stat
// it was computed with.
type (
	linkKey struct {
		layer    string
		dev, ino uint64
	}
	linkSum struct {
		size         uint64
		mtime, ctime int64
		sum          []byte
	}
)

// linkGroup is the upper paths seen for one inode.
type linkGroup struct {
	first   attest.Path
	n       int
	entries []int // indexes into reader.entries
}

// readLayers classifies upper root u against lower root l; either may be
// nil (missing), which the caller has already reported.
func readLayers(u, l node, opt ReadOptions) (*Changes, error) {
	r := &reader{
		opt:     opt,
		private: opt.XattrNS + ".overlay.",
		links:   make(map[[2]uint64]*linkGroup),
	}
	err := r.root(u, l)
	drop := r.finishHashes()
	if err != nil {
		return nil, err
	}
	for _, g := range r.links {
		if g.n < 2 {
			continue
		}
		for _, i := range g.entries {
			r.entries[i].New.Link = g.first
		}
	}
	if len(drop) > 0 {
		r.entries = slices.DeleteFunc(r.entries, func(e attest.Entry) bool { return e.New != nil && drop[e.New] })
	}
	slices.SortFunc(r.entries, func(a, b attest.Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	slices.SortFunc(r.excluded, func(a, b attest.Excluded) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return &Changes{Entries: r.entries, Incomplete: r.reasons, Excluded: r.excluded, Stats: r.stats, outward: r.resolve.outward}, nil
}

func (r *reader) root(u, l node) error {
	if u == nil {
		return nil
	}
	var err error
	if r.upperRoot, err = u.lstat(""); err != nil {
		r.fault(attest.Root, "upper", err)
		return nil
	}
	r.stats.UpperEntries++
	r.resolve = resolver{u: u, l: l, private: r.private, steps: maxResolveStepsRead}
	if l != nil {
		if r.lowerRoot, err = l.lstat(""); err != nil {
			r.fault(attest.Root, "lower", err)
			return nil
		}
		r.stats.LowerEntries++
	}
	r.noMountID = r.opt.NoMountID || !r.upperRoot.HasMountID || (l != nil && !r.lowerRoot.HasMountID)
	if r.noMountID {
		r.reason(attest.NoMountID, "", "mount IDs unavailable: mounts told apart by st_dev only, so bind mounts of the same filesystem are not seen")
	}
	ux, err := u.xattrs()
	if err != nil {
		r.fault(attest.Root, "upper", err)
		return nil
	}
	user, opaque, err := r.split(attest.Root, r.upperRoot, ux, true)
	if err != nil {
		return err
	}
	if opaque {
		return fmt.Errorf("%w: the upper root is marked opaque", ErrForeignUpper)
	}
	newSt := r.state(r.upperRoot, user)
	if l == nil {
		return r.walkDir(attest.Root, u, nil, false)
	}
	lx, err := l.xattrs()
	if err != nil {
		r.fault(attest.Root, "lower", err)
		return nil
	}
	lowerUser, _, _ := r.split(attest.Root, r.lowerRoot, lx, false)
	oldSt := r.state(r.lowerRoot, lowerUser)
	if r.timeOK(attest.Root, "upper", r.upperRoot) && r.timeOK(attest.Root, "lower", r.lowerRoot) && !sameMeta(oldSt, newSt) {
		r.add(attest.Entry{Path: attest.Root, Change: attest.Metadata, Old: oldSt, New: newSt})
	}
	return r.walkDir(attest.Root, u, l, false)
}

// walkDir classifies the children of the upper directory u at p. l is the
// lower directory at p, or nil when p has no lower directory; when opaque,
// lower children missing from u are deleted.
func (r *reader) walkDir(p attest.Path, u, l node, opaque bool) error {
	names, ok := r.list(p, "upper", u)
	if !ok {
		return nil
	}
	var lowerOnly []string
	if opaque && l != nil {
		lnames, ok := r.list(p, "lower", l)
		if ok {
			inUpper := make(map[string]bool, len(names))
			for _, n := range names {
				inUpper[n] = true
			}
			for _, n := range lnames {
				if !inUpper[n] {
					lowerOnly = append(lowerOnly, n)
				}
			}
		}
	}
	for _, name := range names {
		if r.stopped {
			return nil
		}
		if err := r.child(join(p, name), name, u, l); err != nil {
			return err
		}
	}
	for _, name := range lowerOnly {
		if r.stopped {
			return nil
		}
		r.deleted(join(p, name), name, l, nil)
	}
	return nil
}

// list returns the sorted names of directory d at p, or false (with a
// reason) when they cannot be had or are over the per-directory limit.
func (r *reader) list(p attest.Path, layer string, d node) ([]string, bool) {
	names, err := d.names(int(r.opt.MaxDirEntries))
	if err != nil {
		r.fault(p, layer, err)
		return nil, false
	}
	if int64(len(names)) > r.opt.MaxDirEntries {
		r.reason(attest.DirEntryLimit, p, fmt.Sprintf("%s directory has more than %d entries: its contents were not examined", layer, r.opt.MaxDirEntries))
		return nil, false
	}
	slices.Sort(names)
	return names, true
}

// child classifies the upper entry name of u at p against the lower
// entry of the same name in l (absent when l is nil).
func (r *reader) child(p attest.Path, name string, u, l node) error {
	if !r.itemizing && r.reusable(p) {
		r.take(p)
		return nil
	}
	if !r.pathOK(p) {
		return nil
	}
	if r.opt.Exclude != nil && !r.itemizing && r.opt.Exclude(p) {
		return r.summarize(p, name, u, l)
	}
	if !r.count(p, &r.stats.UpperEntries) {
		return nil
	}
	ust, err := u.lstat(name)
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	if !r.onMount(ust, r.upperRoot) {
		r.reason(attest.OtherMount, p, "upper entry is on another mount: excluded with its subtree")
		return nil
	}
	if !r.timeOK(p, "upper", ust) {
		return nil
	}
	var lst *linux.Stat
	if l != nil {
		if !r.count(p, &r.stats.LowerEntries) {
			return nil
		}
		st, err := l.lstat(name)
		switch {
		case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR):
		case err != nil:
			r.fault(p, "lower", err)
			return nil
		case !r.onMount(st, r.lowerRoot):
			r.reason(attest.OtherMount, p, "lower entry is on another mount: excluded with its subtree")
			return nil
		case !r.timeOK(p, "lower", st):
			return nil
		case !isWhiteout(st): // a lower whiteout hides nothing and shows nothing
			lst = &st
		}
	}
	if isWhiteout(ust) {
		if lst != nil {
			r.deleted(p, name, l, lst)
		}
		return nil
	}

	un, err := u.open(name, ust)
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	defer un.close()
	ux, err := un.xattrs()
	if err != nil {
		r.fault(p, "upper", err)
		return nil
	}
	user, opaque, err := r.split(p, ust, ux, true)
	if err != nil {
		return err
	}
	newSt := r.state(ust, user)

	var ln node
	var oldSt *attest.State
	if lst != nil {
		ln, oldSt, err = r.openLower(name, l, *lst)
		if err != nil {
			r.fault(p, "lower", err)
			return nil
		}
		defer ln.close()
	}

	if ust.Mode&unix.S_IFMT == unix.S_IFDIR {
		switch {
		case oldSt == nil:
			r.add(attest.Entry{Path: p, Change: attest.Added, New: newSt})
			ln = nil
		case oldSt.Type != attest.Dir:
			r.add(attest.Entry{Path: p, Change: attest.TypeChange, Old: oldSt, New: newSt})
			ln = nil
		case opaque:
			r.add(attest.Entry{Path: p, Change: attest.Replaced, Old: oldSt, New: newSt})
		case !sameMeta(oldSt, newSt):
			r.add(attest.Entry{Path: p, Change: attest.Metadata, Old: oldSt, New: newSt})
		}
		hidden := opaque || r.inOpaque
		outer, outerFresh := r.inOpaque, r.fresh
		if r.opt.reuse != nil && !r.fresh {
			hadLower, wasHidden := r.prevContext(p, outer)
			r.fresh = hadLower != (ln != nil) || ln != nil && wasHidden != hidden
		}
		r.inOpaque = hidden
		err := r.walkDir(p, un, ln, hidden)
		r.inOpaque, r.fresh = outer, outerFresh
		return err
	}

	change, ok := r.compareNonDir(p, un, ln, ust, lst, newSt, oldSt)
	if !ok {
		return nil
	}
	idx := -1
	if change != "" {
		idx = len(r.entries)
		e := attest.Entry{Path: p, Change: change, New: newSt}
		if change != attest.Added {
			e.Old = oldSt
		}
		r.add(e)
	}
	if change == attest.TypeChange && oldSt.Type == attest.Dir {
		r.deletedBeneath(p, ln)
	}
	if ust.Mode&unix.S_IFMT == unix.S_IFREG && ust.Nlink > 1 {
		r.linked(p, ust, idx)
	}
	return nil
}

// compareNonDir fills in the content of the upper non-directory un (and of
// ln where the comparison needs it) and returns how p changed, "" when it
// did not; false when p could not be classified (a reason was added).
func (r *reader) compareNonDir(p attest.Path, un, ln node, ust linux.Stat, lst *linux.Stat, newSt, oldSt *attest.State) (attest.Change, bool) {
	var err error
	if newSt.Type == attest.Symlink {
		if newSt.Target, err = readTarget(un); err != nil {
			r.fault(p, "upper", err)
			return "", false
		}
	}
	if oldSt == nil || oldSt.Type != newSt.Type {
		if newSt.Type == attest.File {
			if !r.hashLater(p, un, ust, newSt) && !r.hash(p, "upper", un, ust, newSt) {
				return "", false
			}
		}
		if oldSt == nil {
			return attest.Added, true
		}
		return attest.TypeChange, true
	}
	modified := false
	switch newSt.Type {
	case attest.Symlink:
		modified = newSt.Target != oldSt.Target
	case attest.CharDev, attest.BlockDev:
		modified = newSt.Rdev != oldSt.Rdev
	case attest.File:
		switch {
		case newSt.Size != oldSt.Size:
			modified = true
			if !r.hashLater(p, un, ust, newSt) && !r.hash(p, "upper", un, ust, newSt) {
				return "", false
			}
		case r.overCap(ust.Size):
			r.reason(attest.DigestCap, p, fmt.Sprintf("file of %d bytes is over the digest cap of %d: compared by size and mtime only", ust.Size, r.opt.DigestCap))
			modified = newSt.MtimeNS != oldSt.MtimeNS
		default:
			if !r.hash(p, "upper", un, ust, newSt) || !r.hash(p, "lower", ln, *lst, oldSt) {
				return "", false
			}
			modified = !bytes.Equal(newSt.SHA256, oldSt.SHA256)
		}
	}
	switch {
	case modified:
		return attest.Modified, true
	case !sameMeta(oldSt, newSt):
		return attest.Metadata, true
	}
	return "", true
}

// openLower opens the lower entry name of l and reads its state.
func (r *reader) openLower(name string, l node, st linux.Stat) (node, *attest.State, error) {
	n, err := l.open(name, st)
	if err != nil {
		return nil, nil, err
	}
	xs, err := n.xattrs()
	if err != nil {
		n.close()
		return nil, nil, err
	}
	user, _, _ := r.split("", st, xs, false)
	s := r.state(st, user)
	if s.Type == attest.Symlink {
		if s.Target, err = readTarget(n); err != nil {
			n.close()
			return nil, nil, err
		}
	}
	return n, s, nil
}

// deleted lists the lower entry name of l at p as deleted, and with it,
// when it is a directory, everything beneath it. lst is its stat when the
// caller has it.
func (r *reader) deleted(p attest.Path, name string, l node, lst *linux.Stat) {
	if !r.pathOK(p) {
		return
	}
	if lst == nil {
		if !r.count(p, &r.stats.LowerEntries) {
			return
		}
		st, err := l.lstat(name)
		if err != nil {
			r.fault(p, "lower", err)
			return
		}
		if !r.onMount(st, r.lowerRoot) {
			r.reason(attest.OtherMount, p, "lower entry is on another mount: excluded with its subtree")
			return
		}
		if isWhiteout(st) {
			return
		}
		lst = &st
	}
	if !r.timeOK(p, "lower", *lst) {
		return
	}
	n, oldSt, err := r.openLower(name, l, *lst)
	if err != nil {
		// Deleted all the same: the stat proves it existed.
		r.fault(p, "lower", err)
		r.add(attest.Entry{Path: p, Change: attest.Deleted, Old: r.state(*lst, nil)})
		return
	}
	defer n.close()
	r.add(attest.Entry{Path: p, Change: attest.Deleted, Old: oldSt})
	if oldSt.Type == attest.Dir {
		r.deletedBeneath(p, n)
	}
}

// deletedBeneath lists everything beneath the lower directory d at p as
// deleted.
func (r *reader) deletedBeneath(p attest.Path, d node) {
	names, ok := r.list(p, "lower", d)
	if !ok {
		return
	}
	for _, c := range names {
		if r.stopped {
			return
		}
		r.deleted(join(p, c), c, d, nil)
	}
}

// hash sets s.SHA256 to the digest of regular file n (stat st) unless it
// is over the digest cap, which adds a reason; false when it could not be
// read (a reason was added).
func (r *reader) hash(p attest.Path, layer string, n node, st linux.Stat, s *attest.State) bool {
	if r.overCap(st.Size) {
		r.reason(attest.DigestCap, p, fmt.Sprintf("%s file of %d bytes is over the digest cap of %d: not hashed", layer, st.Size, r.opt.DigestCap))
		return true
	}
	if layer == "upper" && r.opt.KnownDigest != nil {
		if sum := r.opt.KnownDigest(p, fileStat(st)); sum != nil {
			s.SHA256 = sum
			return true
		}
	}
	// Reused only in a quiescent read: a checkpoint hashes each name, as
	// the agent may write between them.
	key := linkKey{layer, st.Dev, st.Ino}
	once := st.Nlink > 1 && r.opt.Settle == 0
	if once {
		if c, ok := r.sums[key]; ok && c.size == st.Size && c.mtime == st.MtimeNS && c.ctime == st.CtimeNS {
			s.SHA256 = c.sum
			return true
		}
	}
	if r.opt.Settle > 0 {
		settle(st, r.opt.Settle)
	}
	sum, err := n.digest(r.opt.Deadline, r.opt.Settle > 0)
	if err != nil {
		r.fault(p, layer, err)
		return false
	}
	r.stats.BytesHashed += st.Size
	s.SHA256 = sum
	if once {
		if r.sums == nil {
			r.sums = map[linkKey]linkSum{}
		}
		r.sums[key] = linkSum{st.Size, st.MtimeNS, st.CtimeNS, sum}
	}
	return true
}

func (r *reader) overCap(size uint64) bool { return size > uint64(r.opt.DigestCap) }

// linked records that upper regular file p shares its inode; idx is its
// entry or -1 when p is not listed.
func (r *reader) linked(p attest.Path, st linux.Stat, idx int) {
	key := [2]uint64{st.Dev, st.Ino}
	g := r.links[key]
	if g == nil {
		g = &linkGroup{first: p}
		r.links[key] = g
	}
	g.n++
	if p < g.first {
		g.first = p
	}
	if idx >= 0 {
		g.entries = append(g.entries, idx)
	}
}

// count charges one examined entry to counter and to the budgets; false
// (after adding the budget's reason and stopping) when one has run out.
func (r *reader) count(p attest.Path, counter *int64) bool {
	if r.stopped {
		return false
	}
	if r.stats.UpperEntries+r.stats.LowerEntries >= r.opt.MaxEntries {
		r.stopped = true
		r.reason(attest.EntryBudget, p, fmt.Sprintf("entry budget of %d exhausted here: the rest was not examined", r.opt.MaxEntries))
		return false
	}
	if !r.opt.Deadline.IsZero() && time.Now().After(r.opt.Deadline) {
		r.stopTime(p)
		return false
	}
	*counter++
	if r.opt.Progress != nil {
		r.opt.Progress(p)
	}
	return true
}

func (r *reader) stopTime(p attest.Path) {
	r.stopped = true
	r.reason(attest.TimeBudget, p, "time budget exhausted here: the rest was not examined")
}

// timeOK reports whether st's mtime is one a statement can sign (int64
// nanoseconds: 1677 to 2262); otherwise it adds an Unreadable reason: the
// entry (and its subtree) is not listed, so no wrong time is signed or
// applied, and the change set is not applied automatically.
func (r *reader) timeOK(p attest.Path, layer string, st linux.Stat) bool {
	if !st.MtimeOutOfRange {
		return true
	}
	r.reason(attest.Unreadable, p, fmt.Sprintf("%s entry's mtime lies outside the times a statement holds (int64 nanoseconds: 1677 to 2262): it was not examined, with its subtree", layer))
	return false
}

// fault turns an error reading p in layer into a reason.
func (r *reader) fault(p attest.Path, layer string, err error) {
	code := attest.Unreadable
	switch {
	case errors.Is(err, errTimeUp):
		r.stopTime(p)
		return
	case r.opt.Settle > 0 && errors.Is(err, errSwapped):
		code = attest.Unstable
	case errors.Is(err, errSwapped), errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR),
		errors.Is(err, unix.ELOOP), errors.Is(err, unix.ESTALE):
		code = attest.Vanished
	case errors.Is(err, unix.EXDEV):
		code = attest.OtherMount
	}
	r.reason(code, p, fmt.Sprintf("%s layer: %v", layer, err))
}

// onMount reports whether st is on the mount of root.
func (r *reader) onMount(st, root linux.Stat) bool {
	if r.noMountID {
		return st.Dev == root.Dev
	}
	return linux.SameMount(st, root)
}

func (r *reader) add(e attest.Entry) {
	r.entries = append(r.entries, e)
	r.pathBytes += int64(len(e.Path))
	if r.pathBytes > r.opt.MaxPathBytes && !r.stopped {
		r.stopped = true
		r.reason(attest.PathLimit, e.Path, fmt.Sprintf("the listed paths passed the path bytes budget of %d here: the rest was not examined", r.opt.MaxPathBytes))
	}
}

// pathOK reports whether p is within the path length limit; otherwise it
// adds a PathLimit reason (p and its subtree are not examined).
func (r *reader) pathOK(p attest.Path) bool {
	if int64(len(p)) <= r.opt.MaxPathLen {
		return true
	}
	r.reason(attest.PathLimit, p, fmt.Sprintf("path of %d bytes is over the path length limit of %d: not examined, with its subtree", len(p), r.opt.MaxPathLen))
	return false
}

func (r *reader) reason(code attest.Code, p attest.Path, detail string) {
	r.reasons = append(r.reasons, attest.Reason{Code: code, Path: p, Detail: detail})
}

// split separates overlay's private xattrs from user data: it drops the
// private ones, unescapes ns.overlay.overlay.X to ns.overlay.X, and
// returns the user xattrs sorted by name and whether the entry is marked
// opaque. For the upper layer (checked) it fails with ErrForeignUpper on
// xattrs the pinned options cannot produce.
func (r *reader) split(p attest.Path, st linux.Stat, xs []attest.Xattr, checked bool) ([]attest.Xattr, bool, error) {
	var user []attest.Xattr
	opaque := false
	for _, x := range xs {
		rest, private := strings.CutPrefix(x.Name, r.private)
		if !private {
			user = append(user, x)
			continue
		}
		if esc, ok := strings.CutPrefix(rest, "overlay."); ok {
			user = append(user, attest.Xattr{Name: r.private + esc, Value: x.Value})
			continue
		}
		if !checked {
			continue
		}
		foreign := ""
		switch rest {
		case "redirect", "metacopy":
			foreign = "has a " + rest + " xattr"
		case "opaque":
			if string(x.Value) != "y" {
				foreign = fmt.Sprintf("has opaque xattr %q", x.Value)
			} else if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				opaque = true
			}
		case "whiteout":
			if st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 {
				foreign = "is a zero-size file with a whiteout xattr"
			}
		}
		if foreign != "" {
			return nil, false, fmt.Errorf("%w: %q %s", ErrForeignUpper, p, foreign)
		}
	}
	slices.SortFunc(user, func(a, b attest.Xattr) int { return strings.Compare(a.Name, b.Name) })
	return user, opaque, nil
}

// state is the State of st with user xattrs xs; content fields (digest,
// target) are filled in by the caller when it reads them.
func (r *reader) state(st linux.Stat, xs []attest.Xattr) *attest.State {
	s := &attest.State{
		Type:    fileType(st.Mode),
		Mode:    st.Mode & 07777,
		UID:     st.UID,
		GID:     st.GID,
		MtimeNS: st.MtimeNS,
		Xattrs:  xs,
	}
	switch s.Type {
	case attest.File, attest.Symlink:
		s.Size = st.Size
	case attest.CharDev, attest.BlockDev:
		s.Rdev = st.Rdev
	}
	return s
}

// sameMeta reports whether mode, owner, mtime and user xattrs agree.
func sameMeta(a, b *attest.State) bool {
	return a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID && a.MtimeNS == b.MtimeNS &&
		slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y attest.Xattr) bool {
			return x.Name == y.Name && bytes.Equal(x.Value, y.Value)
		})
}

func readTarget(n node) (attest.Path, error) {
	t, err := n.readlink()
	return attest.Path(t), err
}

// fileTypes pairs each file type with its S_IFMT bits.
var fileTypes = []struct {
	t    attest.Type
	bits uint32
}{
	{attest.File, unix.S_IFREG}, {attest.Dir, unix.S_IFDIR}, {attest.Symlink, unix.S_IFLNK},
	{attest.FIFO, unix.S_IFIFO}, {attest.Socket, unix.S_IFSOCK},
	{attest.CharDev, unix.S_IFCHR}, {attest.BlockDev, unix.S_IFBLK},
}

// fileType is the type of a file of st_mode mode.
func fileType(mode uint32) attest.Type {
	for _, ft := range fileTypes {
		if mode&unix.S_IFMT == ft.bits {
			return ft.t
		}
	}
	return attest.File
}

// typeBits is the S_IFMT bits of type t, 0 for an unknown type.
func typeBits(t attest.Type) uint32 {
	for _, ft := range fileTypes {
		if ft.t == t {
			return ft.bits
		}
	}
	return 0
}

// isWhiteout reports whether st is overlay's whiteout: a 0:0 char device.
func isWhiteout(st linux.Stat) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func join(dir attest.Path, name string) attest.Path {
	if dir == attest.Root {
		return attest.Path(name)
	}
	return dir + "/" + attest.Path(name)
}
