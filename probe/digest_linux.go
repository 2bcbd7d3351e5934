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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// DigestTag opens the bytes a probe digest hashes; it names the format.
const DigestTag = "layerseal/probe/v2\x00"

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
// checkpoints, so memory holds only a summary: one record per directory
// (its path and the SHA-256 of its listing, see DirDigest), while the
// entries themselves are kept in a file (ScanOptions.Dir) and read back,
// checked against that SHA-256, only where Changed needs them. See
// Index.Bytes.
//
// Paths are in path order: by path components, each compared by bytes
// (so "a" < "a/x" < "a-b", a subtree is contiguous and a directory comes
// right before its contents). The root has path ".".
type Index struct {
	root Stat     // the root's own entry
	dirs []dirRec // every directory listed, in path order
	n    int      // entries, the root included
	ents *entryStore
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

// dirRec is one directory listed by a scan: its path ("." for the root),
// the SHA-256 of its listing as kept (DirDigest), where the listing lies
// in the entry store, how many entries it holds and whether any is racy.
type dirRec struct {
	path string
	sum  [32]byte
	off  int64
	size int64
	n    int32
	racy bool
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
	// Dir is the directory in which the index keeps its entries, in a
	// new file of mode 0600 that Close removes; it should be root's
	// alone. Empty: they are kept in memory. If the file cannot be
	// written (a full disk), the scan still succeeds with the right
	// Digest, but Changed against the index fails.
	Dir string
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
// holds about one directory fd per level of the tree per goroutine, and
// the subdirectories still to descend of the directories it is in; a
// directory is held whole while it is listed (its names, and its listing
// of 40 bytes plus the name per entry): one of a million entries cost
// about 100 MiB. The index in memory costs 72 bytes plus the path
// per directory (see Index.Bytes); the entries are in ScanOptions.Dir.
// MaxEntries counts entries as their directories are listed: every
// goroutine stops at the first directory that takes the count past it.
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
	x.ents = newEntryStore(opt.Dir)
	s := &scanner{root: st, max: opt.MaxEntries, limit: max(workers, 1), spawned: 1, x: x}
	s.cond.L = &s.mu
	s.count.Store(1)
	s.setWant()
	s.run(scanJob{fd: fd}) // the caller is the first worker
	s.wg.Wait()
	if s.err != nil {
		x.Close()
		return nil, fmt.Errorf("probe %q: %w", root, s.err)
	}
	x.Unsettled = s.unsettled.Load()
	x.root, x.dirs, x.n = statOf(st), slices.Clip(s.dirs), 1
	slices.SortFunc(x.dirs, func(a, b dirRec) int { return ComparePaths(a.path, b.path) })
	for _, d := range x.dirs {
		x.n += int(d.n)
	}
	x.racy = int(s.racy.Load())
	if x.root.Racy(x.Time, x.Window) {
		x.racy++
	}
	x.seal()
	return x, nil
}

// scanJob is a directory to list: its open fd, which the job owns, and
// its path followed by a slash ("" for the root).
type scanJob struct {
	fd     int
	prefix string
}

// scanner is the state that a scan's workers share. Each directory's
// listing is encoded, hashed and kept in the entry store by the one
// worker that lists it; Scan puts the directories in path order once
// every worker is done.
type scanner struct {
	root      linux.Stat
	x         *Index
	max       int
	count     atomic.Int64 // entries listed so far, the root included: what max bounds
	racy      atomic.Int64 // racy entries listed, the root not included
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
	dirs    []dirRec // each worker adds its share as it ends
}

// worker is one goroutine of a scan, with the directories it is in the
// middle of: for each, the subdirectories left to descend.
type worker struct {
	s      *scanner
	stack  []frame
	locked bool // to its OS thread, once the tree proved large
	dirs   []dirRec
	buf    []byte // a listing being encoded
}

// dirEnt is one entry of a directory being listed.
type dirEnt struct {
	name string
	st   Stat
}

type frame struct {
	fd     int
	prefix string
	subs   []dirEnt // the subdirectories to descend
	next   int      // subs[:next] are done or given away
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
	s.dirs = append(s.dirs, w.dirs...)
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
		i := f.next
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
			i := f.next
			f.next++
			sub, ok := w.open(f, i)
			if ok && !s.give(sub) {
				w.list(sub) // wanted no more: walk it here (it may move the stack)
				return
			}
		}
	}
}

// open opens the subdirectory f.subs[i] and checks that it is the
// directory that was stat'ed, on the root's filesystem.
func (w *worker) open(f *frame, i int) (scanJob, bool) {
	e := &f.subs[i]
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
	return scanJob{fd: fd, prefix: f.prefix + e.name + "/"}, true
}

// list lists j's directory, sorted, stats every entry, keeps the listing
// (see DirDigest) and, when it has subdirectories to descend, pushes it
// onto the stack (which then owns j.fd); otherwise it closes j.fd.
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
	var subs []dirEnt
	d := dirRec{path: strings.TrimSuffix(j.prefix, "/")}
	if d.path == "" {
		d.path = "."
	}
	size := 0
	for _, name := range names {
		size += 4 + len(name) + 36
	}
	if cap(w.buf) < size {
		w.buf = make([]byte, 0, size) // exactly: a flat tree's listing may be large
	}
	w.buf = w.buf[:0]
	for _, name := range names {
		if s.stopped.Load() {
			unix.Close(j.fd)
			return
		}
		lst, err := linux.Lstat(j.fd, name)
		if err != nil {
			// Vanished between listing and stat: the tree is changing.
			s.unsettled.Store(true)
			s.count.Add(-1)
			continue
		}
		st := statOf(lst)
		if lst.Mode&unix.S_IFMT == unix.S_IFDIR && linux.SameMount(lst, s.root) && lst.Dev == s.root.Dev {
			subs = append(subs, dirEnt{name: name, st: st})
		}
		if st.Racy(s.x.Time, s.x.Window) {
			d.racy = true
			s.racy.Add(1)
		}
		w.buf = appendEntry(w.buf, name, st)
		d.n++
	}
	d.sum = sha256.Sum256(w.buf)
	d.off, d.size = s.x.ents.add(w.buf), int64(len(w.buf))
	w.dirs = append(w.dirs, d)
	if cap(w.buf) > 1<<20 {
		w.buf = nil
	}
	if len(subs) == 0 {
		unix.Close(j.fd)
		return
	}
	w.stack = append(w.stack, frame{fd: j.fd, prefix: j.prefix, subs: subs})
}

// appendEntry appends one entry of a listing as DirDigest documents it.
func appendEntry(b []byte, name string, st Stat) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	return appendStat(b, st)
}

func appendStat(b []byte, st Stat) []byte {
	b = binary.BigEndian.AppendUint32(b, st.Mode)
	b = binary.BigEndian.AppendUint64(b, st.Ino)
	b = binary.BigEndian.AppendUint64(b, st.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(st.MtimeNS))
	return binary.BigEndian.AppendUint64(b, uint64(st.CtimeNS))
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

// seal computes the digest.
//
// A directory's listing is, for every entry it held when listed, in
// order of name bytes: uint32 name length, name bytes, uint32 st_mode,
// uint64 inode, uint64 size, int64 mtime_ns, int64 ctime_ns, all
// big-endian; its digest (DirDigest) is the SHA-256 of its listing. The
// index's digest is SHA-256 of DigestTag, the root's stat tuple (the 36
// bytes after the name in a listing) and, for every directory listed in
// path order: uint32 path length, path bytes ("." for the root), its
// 32-byte digest. Directories on other mounts are not listed (their root
// is an entry of their parent's listing).
func (x *Index) seal() {
	h := sha256.New()
	h.Write([]byte(DigestTag))
	h.Write(appendStat(nil, x.root))
	var b [4]byte
	for i := range x.dirs {
		d := &x.dirs[i]
		binary.BigEndian.PutUint32(b[:], uint32(len(d.path)))
		h.Write(b[:])
		h.Write([]byte(d.path))
		h.Write(d.sum[:])
	}
	h.Sum(x.digest[:0])
}

// Digest is the SHA-256 of every entry's path and stat tuple (see seal).
func (x *Index) Digest() [32]byte { return x.digest }

// Len is the number of entries, the root included.
func (x *Index) Len() int { return x.n }

// Racy is the number of entries whose ctime lies within Window before
// Time (or after it).
func (x *Index) Racy() int { return x.racy }

// Bytes is the memory the index holds: its directory records and their
// paths, and the entries when they are kept in memory.
func (x *Index) Bytes() int {
	n := cap(x.dirs) * int(unsafe.Sizeof(dirRec{}))
	for _, d := range x.dirs {
		n += len(d.path)
	}
	return n + x.ents.memBytes()
}

// Close removes the file that keeps the index's entries; Changed against
// the index fails after it. A nil index is closed already.
func (x *Index) Close() error {
	if x == nil {
		return nil
	}
	return x.ents.close()
}

// Unchanged reports whether a checkpoint may skip walking: x (the probe
// just taken) has the digest of prev (the probe of the last checkpoint),
// neither was taken while the tree changed, and neither holds a racy
// entry. It is prev's racy entries that matter: a write after prev in the
// same clock tick as prev's view of an entry leaves its tuple as prev saw
// it, and only prev, whose start is that tick, can tell (x, begun after
// the clock moved on, may not). It reads nothing from disk.
func (x *Index) Unchanged(prev *Index) bool {
	return prev != nil && !x.Unsettled && !prev.Unsettled && prev.racy == 0 && x.racy == 0 && x.digest == prev.digest
}

// Entry is one entry of a listing read back: its name and stat tuple.
type Entry struct {
	Name string
	St   Stat
}

// Listing returns the entries of directory dir as the scan kept them,
// in order of name bytes, read back and checked against the digest held
// in memory. It fails with ErrNotKept when dir was not listed or its
// listing cannot be read back as it was written.
func (x *Index) Listing(dir string) ([]Entry, error) {
	i, ok := slices.BinarySearchFunc(x.dirs, dir, func(d dirRec, p string) int { return ComparePaths(d.path, p) })
	if !ok {
		return nil, fmt.Errorf("probe listing of %q: %w", dir, ErrNotKept)
	}
	return x.listing(&x.dirs[i])
}

// ErrNotKept is the error of Changed and Listing when the entries of an
// index could not be kept or read back as they were written: its file
// could not be written, is gone, or holds other bytes than the scan
// wrote.
var ErrNotKept = errors.New("probe entries not kept")

func (x *Index) listing(d *dirRec) ([]Entry, error) {
	b, err := x.ents.read(d.off, d.size)
	if err != nil {
		return nil, fmt.Errorf("probe listing of %q: %w: %w", d.path, ErrNotKept, err)
	}
	if sha256.Sum256(b) != d.sum {
		return nil, fmt.Errorf("probe listing of %q: %w: it changed on disk", d.path, ErrNotKept)
	}
	out := make([]Entry, 0, d.n)
	for len(b) > 0 {
		n := uint64(binary.BigEndian.Uint32(b))
		if uint64(len(b)) < 4+n+36 {
			return nil, fmt.Errorf("probe listing of %q: %w: truncated", d.path, ErrNotKept)
		}
		e := Entry{Name: string(b[4 : 4+n])}
		t := b[4+n:]
		e.St = Stat{Mode: binary.BigEndian.Uint32(t), Ino: binary.BigEndian.Uint64(t[4:]), Size: binary.BigEndian.Uint64(t[12:]),
			MtimeNS: int64(binary.BigEndian.Uint64(t[20:])), CtimeNS: int64(binary.BigEndian.Uint64(t[28:]))}
		out = append(out, e)
		b = t[36:]
	}
	return out, nil
}

// Dirs returns the paths of the directories listed, in path order.
func (x *Index) Dirs() []string {
	out := make([]string, len(x.dirs))
	for i := range x.dirs {
		out[i] = x.dirs[i].path
	}
	return out
}

// Root is the stat tuple of the root.
func (x *Index) Root() Stat { return x.root }

// childPath is the path of name in directory dir.
func childPath(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
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
// probe to tell). It compares the directories' digests and reads back,
// from both indexes' files, only the listings of directories whose
// digest differs or that hold a racy entry, and every listing of a
// directory only one of them has. It fails with ErrNotKept when a
// listing it needs cannot be read back as it was written: then the
// caller must not rely on either index to say what changed.
func (x *Index) Changed(prev *Index) ([]string, error) {
	var out []string
	if x.root != prev.root || x.root.Racy(x.Time, x.Window) || prev.root.Racy(prev.Time, prev.Window) {
		out = append(out, ".")
	}
	all := func(y *Index, d *dirRec) error {
		ents, err := y.listing(d)
		for _, e := range ents {
			out = append(out, childPath(d.path, e.Name))
		}
		return err
	}
	i, j := 0, 0
	for i < len(x.dirs) || j < len(prev.dirs) {
		c := 0
		switch {
		case i == len(x.dirs):
			c = 1
		case j == len(prev.dirs):
			c = -1
		default:
			c = ComparePaths(x.dirs[i].path, prev.dirs[j].path)
		}
		var err error
		switch {
		case c < 0:
			err = all(x, &x.dirs[i])
			i++
		case c > 0:
			err = all(prev, &prev.dirs[j])
			j++
		default:
			d, pd := &x.dirs[i], &prev.dirs[j]
			i++
			j++
			if d.sum == pd.sum && !d.racy && !pd.racy {
				continue
			}
			err = x.changedIn(prev, d, pd, &out)
		}
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, ComparePaths)
	return out, nil
}

// changedIn appends to out the paths of the entries that differ between
// the listings d of x and pd of prev (the same directory), or are racy.
func (x *Index) changedIn(prev *Index, d, pd *dirRec, out *[]string) error {
	a, err := x.listing(d)
	if err != nil {
		return err
	}
	b, err := prev.listing(pd)
	if err != nil {
		return err
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i].Name < b[j].Name:
			*out = append(*out, childPath(d.path, a[i].Name))
			i++
		case i == len(a) || b[j].Name < a[i].Name:
			*out = append(*out, childPath(d.path, b[j].Name))
			j++
		default:
			if s := a[i].St; s != b[j].St || s.Racy(x.Time, x.Window) || b[j].St.Racy(prev.Time, prev.Window) {
				*out = append(*out, childPath(d.path, a[i].Name))
			}
			i++
			j++
		}
	}
	return nil
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
