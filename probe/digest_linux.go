package probe

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// StatOf is the probe's view of a full stat.
func StatOf(st linux.Stat) Stat {
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
}

// ErrTooMany is returned by Scan when the tree has more entries than
// ScanOptions.MaxEntries.
var ErrTooMany = errors.New("too many entries")

// Scan takes the stat-only picture of the tree at root: one getdents per
// directory and one statx per entry, fd-relative, never following a
// symlink, never opening anything but directories, and not descending
// into other mounts (their root is recorded, as a change of it is). It
// costs one statx per entry and about 48 bytes plus the path per entry.
func Scan(root string, opt ScanOptions) (*Index, error) {
	x := &Index{Time: linux.CoarseNow(), Window: RacyWindow()}
	fd, err := linux.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("probe %q: %w", root, err)
	}
	defer unix.Close(fd)
	st, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, fmt.Errorf("probe %q: %w", root, err)
	}
	x.add(".", st)
	s := scanner{x: x, root: st, max: opt.MaxEntries}
	if err := s.dir(fd, ""); err != nil {
		return nil, fmt.Errorf("probe %q: %w", root, err)
	}
	x.seal()
	return x, nil
}

type scanner struct {
	x    *Index
	root linux.Stat
	max  int
}

func (s *scanner) dir(fd int, prefix string) error {
	names, err := linux.ReadDirNamesMax(fd, 0)
	if err != nil {
		s.x.Unsettled = true
		return nil
	}
	slices.Sort(names)
	for _, name := range names {
		if s.max > 0 && len(s.x.recs) >= s.max {
			return fmt.Errorf("%w: more than %d", ErrTooMany, s.max)
		}
		st, err := linux.Lstat(fd, name)
		if err != nil {
			// Vanished between listing and stat: the tree is changing.
			s.x.Unsettled = true
			continue
		}
		p := prefix + name
		s.x.add(p, st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || !linux.SameMount(st, s.root) || st.Dev != s.root.Dev {
			continue
		}
		sub, err := linux.OpenBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			s.x.Unsettled = true
			continue
		}
		if now, err := linux.Lstat(sub, ""); err != nil || now.Ino != st.Ino || now.Dev != st.Dev {
			s.x.Unsettled = true
		} else if err := s.dir(sub, p+"/"); err != nil {
			unix.Close(sub)
			return err
		}
		unix.Close(sub)
	}
	return nil
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
