package probe

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// DigestTag opens the bytes a probe digest hashes; it names the format.
const DigestTag = "layerseal/probe/v1\x00"

// RacyWindow is how close to a probe an entry's ctime must be for the
// probe to be unable to tell a later write apart (git's racy-clean
// problem). The kernel stamps files from a clock that advances in ticks
// (CLOCK_REALTIME_COARSE: 4 ms with HZ=250; multigrain timestamps, which
// refine ctime on demand, exist only since Linux 6.13), so a write in the
// same tick as the one a probe saw can leave size, mtime and ctime as they
// were. The window is twice the coarse clock's resolution, and at least
// one millisecond: every write that starts at or after time T is stamped
// with a ctime later than T − RacyWindow, so an entry whose ctime is
// earlier than that when a probe began at T cannot be written again
// without its ctime changing. Only ctime counts: every change of content,
// mode, owner, times or xattrs sets it to the current time, and unlike
// mtime (which utimensat sets at will) no one can choose it.
func RacyWindow() time.Duration {
	var res unix.Timespec
	w := 4 * time.Millisecond
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res); err == nil && res.Nano() > 0 {
		w = time.Duration(res.Nano())
	}
	return max(2*w, time.Millisecond)
}

// Index is a stat-only picture of a directory tree (an upper layer): for
// every entry, its path, type and permission bits, inode, size, mtime and
// ctime, from statx alone, without reading any file. It is held between
// checkpoints, so it is compact: one fixed-size record of 48 bytes per
// entry and the paths in one byte arena (see Index.Bytes).
//
// Entries are in path order: by path components, each compared by bytes
// (so "a" < "a/x" < "a-b", a subtree is contiguous and a directory comes
// right before its contents). The root is the first entry, with path ".".
type Index struct {
	recs  []record
	arena []byte
	// Time is when the probe began, from CLOCK_REALTIME_COARSE: the clock
	// of file times (linux.CoarseNow).
	Time time.Time
	// Window is the RacyWindow the probe used.
	Window time.Duration
	// Unsettled is set when the tree changed while it was probed: an
	// entry vanished or was replaced between listing and stat, or a
	// directory could not be listed. Such an index never gates a
	// checkpoint as unchanged.
	Unsettled bool
	digest    [32]byte
	racy      int
}

// record is one entry; off and n locate its path in the arena.
type record struct {
	off, n uint32
	mode   uint32 // st_mode: type and permission bits
	_      uint32
	ino    uint64
	size   uint64
	mtime  int64 // ns since the epoch
	ctime  int64
}

// Stat is one entry of an Index.
type Stat struct {
	Mode    uint32 // st_mode
	Ino     uint64
	Size    uint64
	MtimeNS int64
	CtimeNS int64
}

// statOf is the probe's view of a full stat.
func statOf(st linux.Stat) Stat {
	return Stat{Mode: st.Mode, Ino: st.Ino, Size: st.Size, MtimeNS: st.MtimeNS, CtimeNS: st.CtimeNS}
}

// Racy reports whether st's ctime is at or after since − window: a write
// to the entry in the same clock tick would leave st as it is.
func (st Stat) Racy(since time.Time, window time.Duration) bool {
	return st.CtimeNS >= since.UnixNano()-int64(window)
}

// ScanOptions bound a Scan.
type ScanOptions struct {
	// MaxEntries stops the scan with ErrTooMany past this many entries;
	// 0 means no bound.
	MaxEntries int
	// Flush writes back the dirty pages of the tree's filesystem (syncfs)
	// after Index.Time is taken and before any entry is stat'ed. A write
	// through a shared mapping whose page is dirty stamps no time; once
	// written back, the page is write-protected, and on a filesystem
	// where MappedWritesStamped holds the next write stamps ctime. So an
	// entry whose ctime is before Time − Window (not racy) has no page
	// that can be written without its ctime changing.
	Flush bool
}

// ErrTooMany is returned by Scan when the tree has more entries than
// ScanOptions.MaxEntries.
var ErrTooMany = errors.New("too many entries")

// Scan takes the stat-only picture of the tree at root: one getdents per
// directory and one statx per entry, fd-relative, never following a
// symlink, never opening anything but directories, and not descending
// into other mounts (their root is recorded, as a change of it is).
//
// It is parallel: up to min(GOMAXPROCS, 8) goroutines list directories
// and stat their entries, a directory at a time, giving subdirectories to
// idle ones (a tree of fewer than 256 entries stays on the caller's), so
// its wall time approaches one statx per entry divided among them. It
// holds about one directory fd per level of the tree per goroutine. The
// index costs 48 bytes plus the path per entry; while scanning, about
// twice that. MaxEntries counts entries as their directories are listed:
// every goroutine stops at the first directory that takes the count past
// it.
func Scan(root string, opt ScanOptions) (*Index, error) {
	return scanWith(root, opt, min(runtime.GOMAXPROCS(0), maxScanWorkers))
}

// shareAfter is how many entries a scan lists before its workers give
// work away: a tree smaller than that is walked faster by one goroutine
// than it takes to wake another.
const shareAfter = 256

// lockAfter is how many entries a scan lists before each worker locks its
// OS thread. Measured on two cores: locked workers scan a tree of 100,000
// entries about a tenth faster, but hand work over more slowly, which
// costs more than it gains in trees of a few thousand.
const lockAfter = 8192

// maxScanWorkers bounds Scan's goroutines: statx scales with cores, but
// past a few of them the directory locks of a shallow tree are shared.
const maxScanWorkers = 8

// scanWith is Scan with workers goroutines at most (1: all in the caller's).
func scanWith(root string, opt ScanOptions, workers int) (*Index, error) {
	x := &Index{Time: linux.CoarseNow(), Window: RacyWindow()}
	fd, err := linux.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("probe %q: %w", root, err)
	}
	if opt.Flush {
		if err := unix.Syncfs(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("probe %q: write back: %w", root, err)
		}
	}
	st, err := linux.Lstat(fd, "")
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("probe %q: %w", root, err)
	}
	s := &scanner{root: st, max: opt.MaxEntries, limit: max(workers, 1), spawned: 1, entries: 1, pathBytes: 1}
	s.cond.L = &s.mu
	s.count.Store(1)
	s.setWant()
	top := new(dirNode)
	s.run(scanJob{fd: fd, node: top}) // the caller is the first worker
	s.wg.Wait()
	if s.err != nil {
		return nil, fmt.Errorf("probe %q: %w", root, s.err)
	}
	x.Unsettled = s.unsettled.Load()
	x.recs = make([]record, 0, s.entries)
	x.arena = make([]byte, 0, s.pathBytes)
	x.add(".", st)
	x.addDir(top, nil)
	x.seal()
	return x, nil
}

// A dirNode holds what a scan found in one directory: its entries that
// were still there to stat, sorted by name.
type dirNode struct{ ents []dirEnt }

// dirEnt is one entry; sub is set when the scan descended into it.
type dirEnt struct {
	name string
	st   Stat
	sub  *dirNode
}

// scanJob is a directory to list: its open fd, which the job owns, its
// path followed by a slash ("" for the root), and the node to fill.
type scanJob struct {
	fd     int
	prefix string
	node   *dirNode
}

// scanner is the state that a scan's workers share. Each directory's
// entries go into its own dirNode, written by the one worker that lists
// it; Scan puts them in path order once every worker is done.
type scanner struct {
	root      linux.Stat
	max       int
	count     atomic.Int64 // entries listed so far, the root included: what max bounds
	unsettled atomic.Bool
	stopped   atomic.Bool
	// want is how many more directories idle or not yet started workers
	// could take: idle + limit − spawned − len(jobs). A busy worker reads
	// it before each subdirectory and gives work away while it is above 0.
	want atomic.Int32

	mu      sync.Mutex
	cond    sync.Cond // signalled when jobs grows or the scan is over
	jobs    []scanJob
	limit   int  // workers at most, the caller included
	spawned int  // workers started, the caller included
	idle    int  // workers waiting for a job
	over    bool // no job is left and none can come, or the scan stopped
	err     error
	wg      sync.WaitGroup
	// entries and pathBytes are the index's sizes, the root included:
	// each worker adds its share as it ends.
	entries, pathBytes int
}

// worker is one goroutine of a scan, with the directories it is in the
// middle of: for each, the subdirectories left to descend.
type worker struct {
	s                  *scanner
	stack              []frame
	locked             bool // to its OS thread, once the tree proved large
	entries, pathBytes int
}

type frame struct {
	fd     int
	prefix string
	ents   []dirEnt
	subs   []int32 // indexes in ents of the directories to descend
	next   int     // subs[:next] are done or given away
}

// run is a worker: it walks j, then whatever the others give it.
func (s *scanner) run(j scanJob) {
	w := worker{s: s}
	for ok := true; ok; j, ok = s.take() {
		w.walk(j)
	}
	if w.locked {
		runtime.UnlockOSThread()
	}
	s.mu.Lock()
	s.entries += w.entries
	s.pathBytes += w.pathBytes
	s.mu.Unlock()
}

// walk lists j's directory and, depth first, the subdirectories beneath it
// that it does not give away. Every fd it holds is closed when it returns.
func (w *worker) walk(j scanJob) {
	s := w.s
	w.list(j)
	for len(w.stack) > 0 {
		if !w.locked && s.count.Load() >= lockAfter {
			runtime.LockOSThread()
			w.locked = true
		}
		if s.stopped.Load() {
			for _, f := range w.stack {
				unix.Close(f.fd)
			}
			w.stack = w.stack[:0]
			return
		}
		if s.want.Load() > 0 && s.count.Load() >= shareAfter {
			w.share()
		}
		f := &w.stack[len(w.stack)-1]
		if f.next == len(f.subs) {
			unix.Close(f.fd)
			w.stack = w.stack[:len(w.stack)-1]
			continue
		}
		i := f.subs[f.next]
		f.next++
		if sub, ok := w.open(f, i); ok {
			w.list(sub)
		}
	}
}

// share gives others the shallowest subdirectories still to descend,
// the likeliest to be large, while some worker wants one.
func (w *worker) share() {
	s := w.s
	left := 0
	for _, f := range w.stack {
		left += len(f.subs) - f.next
	}
	for k := 0; k < len(w.stack) && s.want.Load() > 0; k++ {
		// Keep the last one: giving it away would leave this worker idle.
		for f := &w.stack[k]; f.next < len(f.subs) && left > 1 && s.want.Load() > 0; left-- {
			i := f.subs[f.next]
			f.next++
			sub, ok := w.open(f, i)
			if ok && !s.give(sub) {
				w.list(sub) // wanted no more: walk it here (it may move the stack)
				return
			}
		}
	}
}

// open opens the subdirectory f.ents[i] and checks that it is the
// directory that was stat'ed, on the root's filesystem.
func (w *worker) open(f *frame, i int32) (scanJob, bool) {
	e := &f.ents[i]
	fd, err := linux.OpenBeneath(f.fd, e.name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		w.s.unsettled.Store(true)
		return scanJob{}, false
	}
	if now, err := linux.Lstat(fd, ""); err != nil || now.Ino != e.st.Ino || now.Dev != w.s.root.Dev {
		// Replaced between stat and open.
		unix.Close(fd)
		w.s.unsettled.Store(true)
		return scanJob{}, false
	}
	e.sub = new(dirNode)
	return scanJob{fd: fd, prefix: f.prefix + e.name + "/", node: e.sub}, true
}

// list lists j's directory, sorted, stats every entry into j.node and,
// when it has subdirectories to descend, pushes it onto the stack (which
// then owns j.fd); otherwise it closes j.fd.
func (w *worker) list(j scanJob) {
	s := w.s
	limit := 0
	if s.max > 0 {
		// Hold no more names than the bound leaves room for (and one).
		limit = max(s.max-int(s.count.Load()), 1)
	}
	names, err := linux.ReadDirNamesMax(j.fd, limit)
	if err != nil {
		s.unsettled.Store(true)
		unix.Close(j.fd)
		return
	}
	if s.count.Add(int64(len(names))) > int64(s.max) && s.max > 0 {
		unix.Close(j.fd)
		s.fail(fmt.Errorf("%w: more than %d", ErrTooMany, s.max))
		return
	}
	slices.Sort(names)
	ents := make([]dirEnt, 0, len(names))
	var subs []int32
	for _, name := range names {
		if s.stopped.Load() {
			unix.Close(j.fd)
			return
		}
		st, err := linux.Lstat(j.fd, name)
		if err != nil {
			// Vanished between listing and stat: the tree is changing.
			s.unsettled.Store(true)
			s.count.Add(-1)
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && linux.SameMount(st, s.root) && st.Dev == s.root.Dev {
			subs = append(subs, int32(len(ents)))
		}
		ents = append(ents, dirEnt{name: name, st: statOf(st)})
		w.entries++
		w.pathBytes += len(j.prefix) + len(name)
	}
	j.node.ents = ents
	if len(subs) == 0 {
		unix.Close(j.fd)
		return
	}
	w.stack = append(w.stack, frame{fd: j.fd, prefix: j.prefix, ents: ents, subs: subs})
}

// setWant recomputes want; s.mu is held.
func (s *scanner) setWant() {
	n := 0
	if !s.over {
		n = s.idle + s.limit - s.spawned - len(s.jobs)
	}
	s.want.Store(int32(n))
}

// give hands j to a worker, starting one if the limit allows, and
// reports whether it took j: it does not when no worker wants it. Once
// the scan has stopped it takes j only to close it.
func (s *scanner) give(j scanJob) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.over:
		unix.Close(j.fd)
	case s.spawned < s.limit:
		s.spawned++
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.run(j)
		}()
	case s.idle > len(s.jobs):
		s.jobs = append(s.jobs, j)
		s.cond.Signal()
	default:
		return false
	}
	s.setWant()
	return true
}

// take waits for a job; it reports false once the scan is over: no job is
// queued and every worker waits, or the scan stopped.
func (s *scanner) take() (scanJob, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle++
	s.setWant()
	for len(s.jobs) == 0 && !s.over {
		if s.idle == s.spawned {
			s.over = true
			s.setWant()
			s.cond.Broadcast()
			break
		}
		s.cond.Wait()
	}
	if s.over {
		return scanJob{}, false
	}
	j := s.jobs[len(s.jobs)-1]
	s.jobs = s.jobs[:len(s.jobs)-1]
	s.idle--
	s.setWant()
	return j, true
}

// fail stops the scan with err: every worker returns promptly and queued
// jobs are closed.
func (s *scanner) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	s.stopped.Store(true)
	s.over = true
	for _, j := range s.jobs {
		unix.Close(j.fd)
	}
	s.jobs = nil
	s.setWant()
	s.cond.Broadcast()
}

// addDir appends n's entries and, after each directory, its own, in path
// order; prefix is n's path followed by a slash (empty for the root).
func (x *Index) addDir(n *dirNode, prefix []byte) {
	for i := range n.ents {
		e := &n.ents[i]
		off := len(x.arena)
		x.arena = append(x.arena, prefix...)
		x.arena = append(x.arena, e.name...)
		x.recs = append(x.recs, record{
			off: uint32(off), n: uint32(len(x.arena) - off),
			mode: e.st.Mode, ino: e.st.Ino, size: e.st.Size, mtime: e.st.MtimeNS, ctime: e.st.CtimeNS,
		})
		if e.sub != nil {
			p := append(prefix, e.name...) // siblings reuse what lies past prefix
			x.addDir(e.sub, append(p, '/'))
		}
	}
}

func (x *Index) add(p string, st linux.Stat) {
	x.recs = append(x.recs, record{
		off: uint32(len(x.arena)), n: uint32(len(p)),
		mode: st.Mode, ino: st.Ino, size: st.Size, mtime: st.MtimeNS, ctime: st.CtimeNS,
	})
	x.arena = append(x.arena, p...)
}

// seal computes the digest and the racy count and trims spare capacity.
//
// The digest is SHA-256 of DigestTag followed by, for every entry in
// path order: uint32 path length, path bytes, uint32 st_mode, uint64
// inode, uint64 size, int64 mtime_ns, int64 ctime_ns, all big-endian.
func (x *Index) seal() {
	x.recs = slices.Clip(x.recs)
	x.arena = slices.Clip(x.arena)
	h := sha256.New()
	h.Write([]byte(DigestTag))
	var b [40]byte
	for i := range x.recs {
		r := &x.recs[i]
		binary.BigEndian.PutUint32(b[0:], r.n)
		h.Write(b[:4])
		h.Write(x.arena[r.off : r.off+r.n])
		binary.BigEndian.PutUint32(b[0:], r.mode)
		binary.BigEndian.PutUint64(b[4:], r.ino)
		binary.BigEndian.PutUint64(b[12:], r.size)
		binary.BigEndian.PutUint64(b[20:], uint64(r.mtime))
		binary.BigEndian.PutUint64(b[28:], uint64(r.ctime))
		h.Write(b[:36])
		if x.stat(i).Racy(x.Time, x.Window) {
			x.racy++
		}
	}
	h.Sum(x.digest[:0])
}

// Digest is the SHA-256 of every entry's path and stat tuple (see seal).
func (x *Index) Digest() [32]byte { return x.digest }

// Len is the number of entries, the root included.
func (x *Index) Len() int { return len(x.recs) }

// Racy is the number of entries whose ctime lies within Window before
// Time (or after it).
func (x *Index) Racy() int { return x.racy }

// Path returns the path of entry i ("." for the root).
func (x *Index) Path(i int) string {
	r := &x.recs[i]
	return string(x.arena[r.off : r.off+r.n])
}

func (x *Index) pathBytes(i int) []byte {
	r := &x.recs[i]
	return x.arena[r.off : r.off+r.n]
}

func (x *Index) stat(i int) Stat {
	r := &x.recs[i]
	return Stat{Mode: r.mode, Ino: r.ino, Size: r.size, MtimeNS: r.mtime, CtimeNS: r.ctime}
}

// Stat returns the tuple of entry i.
func (x *Index) Stat(i int) Stat { return x.stat(i) }

// Find returns the index of the entry at path p, or -1. It costs a binary
// search: O(log n) path comparisons.
func (x *Index) Find(p string) int {
	if p == "." {
		if len(x.recs) > 0 {
			return 0
		}
		return -1
	}
	lo, hi := 1, len(x.recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ComparePaths(string(x.pathBytes(m)), p) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(x.recs) && string(x.pathBytes(lo)) == p {
		return lo
	}
	return -1
}

// Bytes is the memory the index holds: its records and its path arena.
func (x *Index) Bytes() int { return cap(x.recs)*recordSize + cap(x.arena) }

const recordSize = 48

// Unchanged reports whether a checkpoint may skip walking: x (the probe
// just taken) has the digest of prev (the probe of the last checkpoint),
// neither was taken while the tree changed, and neither holds a racy
// entry. It is prev's racy entries that matter: a write after prev in the
// same clock tick as prev's view of an entry leaves its tuple as prev saw
// it, and only prev, whose start is that tick, can tell (x, begun after
// the clock moved on, may not).
func (x *Index) Unchanged(prev *Index) bool {
	return prev != nil && !x.Unsettled && !prev.Unsettled && prev.racy == 0 && x.racy == 0 && x.digest == prev.digest
}

// ComparePaths orders slash-separated paths by their components, each
// compared by bytes: like bytes.Compare with '/' sorting before every
// other byte. "." (the root) sorts first.
func ComparePaths(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == ".":
		return -1
	case b == ".":
		return 1
	}
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		if ca == '/' {
			return -1
		}
		if cb == '/' {
			return 1
		}
		if ca < cb {
			return -1
		}
		return 1
	}
	return strings.Compare(a[n:], b[n:]) // the shorter is a prefix: it sorts first
}

// Changed returns, in path order, the paths whose entry differs between
// prev and x: added, removed, with another stat tuple, or racy in either
// (changed, or possibly changed in the same clock tick, too close to its
// probe to tell). It costs one merge of the two sorted indexes.
func (x *Index) Changed(prev *Index) []string {
	var out []string
	i, j := 0, 0
	for i < len(x.recs) || j < len(prev.recs) {
		c := 0
		switch {
		case i == len(x.recs):
			c = 1
		case j == len(prev.recs):
			c = -1
		case i == 0 && j == 0:
		default:
			c = ComparePaths(string(x.pathBytes(i)), string(prev.pathBytes(j)))
		}
		switch {
		case c < 0:
			out = append(out, x.Path(i))
			i++
		case c > 0:
			out = append(out, prev.Path(j))
			j++
		default:
			if s := x.stat(i); s != prev.stat(j) || s.Racy(x.Time, x.Window) || prev.stat(j).Racy(prev.Time, prev.Window) {
				out = append(out, x.Path(i))
			}
			i++
			j++
		}
	}
	return out
}

// Touches reports whether changed (in path order, as from Changed) holds
// p or a path beneath it. It costs a binary search.
func Touches(changed []string, p string) bool {
	i, _ := slices.BinarySearchFunc(changed, p, ComparePaths)
	if i == len(changed) {
		return false
	}
	q := changed[i]
	return q == p || p == "." || strings.HasPrefix(q, p) && len(q) > len(p) && q[len(p)] == '/'
}
