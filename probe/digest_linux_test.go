package probe

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

func scan(t *testing.T, root string) *Index {
	t.Helper()
	x, err := Scan(root, ScanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func mkfile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func setMtime(t *testing.T, p string, ns int64) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

func TestScanOrderAndFind(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"a/x", "a-b", "a.c", "a0", "b/c/d", "\xff", "new\nline"} {
		mkfile(t, filepath.Join(root, p), p)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// A FIFO with no writer: opening it for reading would block the scan.
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	x := scan(t, root)
	var got []string
	for _, e := range entries(t, x) {
		got = append(got, e.path)
	}
	want := []string{".", "a", "a/x", "a-b", "a.c", "a0", "b", "b/c", "b/c/d", "fifo", "link", "new\nline", "\xff"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if !slices.IsSortedFunc(got, ComparePaths) {
		t.Error("scan order is not ComparePaths order")
	}
	if x.Len() != len(want) {
		t.Errorf("Len %d, want %d", x.Len(), len(want))
	}
	if ents, err := x.Listing("b/c"); err != nil || len(ents) != 1 || ents[0].Name != "d" {
		t.Errorf("listing of b/c: %v, %v", ents, err)
	}
	for _, p := range []string{"a/x", "b/c/d/e", "zz", ""} {
		if _, err := x.Listing(p); !errors.Is(err, ErrNotKept) {
			t.Errorf("listing of %q: %v, want ErrNotKept", p, err)
		}
	}
	// Entries kept in memory (no Dir) are counted; in a file, only the
	// directories are held.
	dirs := []string{".", "a", "b", "b/c"}
	if !slices.Equal(x.Dirs(), dirs) {
		t.Errorf("dirs %q, want %q", x.Dirs(), dirs)
	}
	y, err := Scan(root, ScanOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if y.Digest() != x.Digest() {
		t.Error("the digest depends on where the entries are kept")
	}
	held := len(dirs)*int(unsafe.Sizeof(dirRec{})) + len(".abb/c")
	if y.Bytes() != held || x.Bytes() <= held {
		t.Errorf("holds %d bytes with a file, %d without, want %d and more", y.Bytes(), x.Bytes(), held)
	}
}

// entries returns every entry of x in path order, its listings read back.
func entries(t *testing.T, x *Index) []refEntry {
	t.Helper()
	out := []refEntry{{".", x.Root()}}
	for _, d := range x.Dirs() {
		ents, err := x.Listing(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			out = append(out, refEntry{childPath(d, e.Name), e.St})
		}
	}
	slices.SortFunc(out, func(a, b refEntry) int { return ComparePaths(a.path, b.path) })
	return out
}

// statAt returns the stat tuple of the entry at p in x.
func statAt(t *testing.T, x *Index, p string) Stat {
	t.Helper()
	for _, e := range entries(t, x) {
		if e.path == p {
			return e.st
		}
	}
	t.Fatalf("no entry %q", p)
	return Stat{}
}

// TestDigestSeesHiddenChanges: changes that keep size and mtime change
// the digest (ctime, inode), and writes right after a probe are caught.
func TestDigestSeesHiddenChanges(t *testing.T) {
	root := t.TempDir()
	f := filepath.Join(root, "f")
	mkfile(t, f, "AAAA")
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	setMtime(t, f, old)
	time.Sleep(2 * RacyWindow())
	base := scan(t, root)
	if base.Racy() != 0 {
		t.Fatalf("%d racy entries in a settled tree", base.Racy())
	}
	if again := scan(t, root); !again.Unchanged(base) {
		t.Fatal("an untouched tree does not read unchanged")
	}

	t.Run("utimensat restores mtime", func(t *testing.T) {
		mkfile(t, f, "BBBB")
		setMtime(t, f, old)
		x := scan(t, root)
		if x.Digest() == base.Digest() {
			t.Error("same-size write with mtime restored left the digest as it was")
		}
	})
	t.Run("rename over, same size and mtime", func(t *testing.T) {
		time.Sleep(2 * RacyWindow())
		before := scan(t, root)
		tmp := filepath.Join(root, "tmp")
		mkfile(t, tmp, "CCCC")
		setMtime(t, tmp, old)
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
		// Even where ctime could not tell them apart, the inode does.
		x := scan(t, root)
		if statAt(t, x, "f").Ino == statAt(t, before, "f").Ino {
			t.Fatal("rename kept the inode")
		}
		if x.Digest() == before.Digest() {
			t.Error("replacement by rename left the digest as it was")
		}
	})
	t.Run("write in the same tick", func(t *testing.T) {
		near := 0 // rounds whose probe began within half the window of the write
		for round := 0; round < 20 || near == 0 && round < 200; round++ {
			time.Sleep(2 * RacyWindow())
			written := linux.CoarseNow() // the clock of ctime and of p1.Time
			mkfile(t, f, "DDDD")
			p1 := scan(t, root)
			// Same size, same mtime if in the same tick, right after the
			// probe: the probe must not vouch for it.
			mkfile(t, f, "EEEE")
			p2 := scan(t, root)
			if p2.Unchanged(p1) {
				t.Fatal("a write right after a probe reads as unchanged")
			}
			// The file's ctime is at least written, on the same coarse
			// clock as the probe's start, so a probe begun within the
			// window must call it racy; a busy machine may start it later.
			if p1.Time.Sub(written) > p1.Window/2 {
				continue
			}
			near++
			if p1.Racy() == 0 {
				t.Fatalf("a file written %v before the probe is not racy", p1.Time.Sub(written))
			}
		}
		if near == 0 {
			t.Fatal("in 200 rounds no probe began within half the racy window of the write")
		}
	})
}

func TestRacy(t *testing.T) {
	now := time.Unix(1000, 0)
	w := 8 * time.Millisecond
	for _, c := range []struct {
		ctime time.Duration // relative to now
		racy  bool
	}{{-time.Second, false}, {-w - 1, false}, {-w, true}, {-time.Millisecond, true}, {0, true}, {time.Hour, true}} {
		st := Stat{CtimeNS: now.Add(c.ctime).UnixNano(), MtimeNS: 0}
		if st.Racy(now, w) != c.racy {
			t.Errorf("ctime %v from the probe: racy %t, want %t", c.ctime, !c.racy, c.racy)
		}
	}
	if RacyWindow() < time.Millisecond {
		t.Errorf("racy window %v", RacyWindow())
	}
}

func TestScanMaxEntries(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"a", "b", "c"} {
		mkfile(t, filepath.Join(root, p), p)
	}
	if _, err := Scan(root, ScanOptions{MaxEntries: 2}); err == nil {
		t.Error("scan over its bound succeeded")
	}
	if _, err := Scan(filepath.Join(root, "missing"), ScanOptions{}); err == nil {
		t.Error("scan of a missing root succeeded")
	}
}

// refEntry is one entry of referenceScan.
type refEntry struct {
	path string
	st   Stat
}

// referenceScan walks root the plain way, one directory after the other,
// depth first in sorted order: the picture a Scan must give.
func referenceScan(t *testing.T, root string) []refEntry {
	t.Helper()
	fd, err := linux.Openat(unix.AT_FDCWD, root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	top, err := linux.Lstat(fd, "")
	if err != nil {
		t.Fatal(err)
	}
	out := []refEntry{{".", statOf(top)}}
	var walk func(fd int, prefix string)
	walk = func(fd int, prefix string) {
		names, err := linux.ReadDirNamesMax(fd, 0)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		for _, name := range names {
			st, err := linux.Lstat(fd, name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, refEntry{prefix + name, statOf(st)})
			if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != top.Dev || !linux.SameMount(st, top) {
				continue
			}
			sub, err := linux.OpenBeneath(fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				t.Fatal(err)
			}
			walk(sub, prefix+name+"/")
			unix.Close(sub)
		}
	}
	walk(fd, "")
	return out
}

// refDigest is the digest of entries (in path order, the root first) as
// Index.seal documents it: every directory's listing hashed, then the
// root's stat and each directory's path and listing digest, in path
// order.
func refDigest(entries []refEntry) [32]byte {
	listings := map[string][]byte{}
	var dirs []string
	for _, e := range entries {
		if e.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dirs = append(dirs, e.path)
			listings[e.path] = []byte{} // listed even when empty
		}
		if e.path == "." {
			continue
		}
		dir, name := ".", e.path
		if i := strings.LastIndexByte(e.path, '/'); i >= 0 {
			dir, name = e.path[:i], e.path[i+1:]
		}
		b := listings[dir]
		b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
		b = append(b, name...)
		b = binary.BigEndian.AppendUint32(b, e.st.Mode)
		b = binary.BigEndian.AppendUint64(b, e.st.Ino)
		b = binary.BigEndian.AppendUint64(b, e.st.Size)
		b = binary.BigEndian.AppendUint64(b, uint64(e.st.MtimeNS))
		b = binary.BigEndian.AppendUint64(b, uint64(e.st.CtimeNS))
		listings[dir] = b
	}
	b := []byte(DigestTag)
	root := entries[0].st
	b = binary.BigEndian.AppendUint32(b, root.Mode)
	b = binary.BigEndian.AppendUint64(b, root.Ino)
	b = binary.BigEndian.AppendUint64(b, root.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(root.MtimeNS))
	b = binary.BigEndian.AppendUint64(b, uint64(root.CtimeNS))
	for _, d := range dirs { // entries are in path order
		b = binary.BigEndian.AppendUint32(b, uint32(len(d)))
		b = append(b, d...)
		sum := sha256.Sum256(listings[d])
		b = append(b, sum[:]...)
	}
	return sha256.Sum256(b)
}

// hostileTree fills root with dirs directories, nested to varying depths,
// holding files, empty directories, symlinks (to directories among them),
// FIFOs and names that sort close together, with newlines or invalid
// UTF-8. It is the same tree for the same seed.
func hostileTree(t *testing.T, root string, dirs int, seed uint64) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	names := []string{"a", "a-b", "a.c", "a0", "b", "new\nline", "\xff", "\xfe\xff", "é", "z z", "-", "_", "x\x01"}
	name := func() string {
		return fmt.Sprintf("%s%d", names[rnd.IntN(len(names))], rnd.IntN(40))
	}
	all := []string{root}
	for len(all) < dirs {
		parent := all[rnd.IntN(len(all))]
		d := filepath.Join(parent, name())
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() && !slices.Contains(all, d) {
			all = append(all, d)
		}
	}
	for _, d := range all {
		for range rnd.IntN(12) {
			p := filepath.Join(d, name())
			if _, err := os.Lstat(p); err == nil {
				continue
			}
			var err error
			switch rnd.IntN(6) {
			case 0:
				err = os.Symlink(all[rnd.IntN(len(all))], p) // a directory: never to be entered
			case 1:
				err = os.Symlink("..", p)
			case 2:
				err = unix.Mkfifo(p, 0o600)
			default:
				err = os.WriteFile(p, make([]byte, rnd.IntN(3000)), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestScanParallelMatchesReference: whatever the number of workers, a scan
// gives the plain walk's paths and stats in path order, the digest of the
// documented format and the same racy count, sized exactly.
func TestScanParallelMatchesReference(t *testing.T) {
	root := t.TempDir()
	hostileTree(t, root, 400, 7)
	want := referenceScan(t, root)
	if len(want) < 1000 {
		t.Fatalf("the tree has only %d entries", len(want))
	}
	// Held: a record and the path of each directory listed; the
	// listings are in a file.
	dirs, dirPaths := 1, 1
	for _, e := range want[1:] {
		if e.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dirs++
			dirPaths += len(e.path)
		}
	}
	keep := t.TempDir()
	for _, workers := range []int{1, 2, 3, 8, 0} {
		for round := range 3 {
			var x *Index
			var err error
			if workers == 0 {
				x, err = Scan(root, ScanOptions{Dir: keep})
			} else {
				x, err = scanWith(root, ScanOptions{Dir: keep}, workers)
			}
			if err != nil {
				t.Fatal(err)
			}
			if x.Len() != len(want) {
				t.Fatalf("workers %d round %d: %d entries, want %d", workers, round, x.Len(), len(want))
			}
			racy := 0
			got := entries(t, x)
			for i, e := range want {
				if got[i] != e {
					t.Fatalf("workers %d round %d: entry %d is %q %+v, want %q %+v", workers, round, i, got[i].path, got[i].st, e.path, e.st)
				}
				if e.st.Racy(x.Time, x.Window) {
					racy++
				}
			}
			if x.Digest() != refDigest(want) {
				t.Fatalf("workers %d round %d: digest differs from the documented format's", workers, round)
			}
			defer x.Close()
			if x.Racy() != racy || x.Unsettled {
				t.Fatalf("workers %d round %d: %d racy (want %d), unsettled %t", workers, round, x.Racy(), racy, x.Unsettled)
			}
			if x.Bytes() != dirs*int(unsafe.Sizeof(dirRec{}))+dirPaths {
				t.Fatalf("workers %d round %d: holds %d bytes, want %d", workers, round, x.Bytes(), dirs*int(unsafe.Sizeof(dirRec{}))+dirPaths)
			}
		}
	}
}

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestScanMaxEntriesParallel: the bound holds exactly with any number of
// workers, and a scan stopped by it leaves no fd open and no goroutine
// running.
func TestScanMaxEntriesParallel(t *testing.T) {
	root := t.TempDir()
	hostileTree(t, root, 300, 11)
	n := len(referenceScan(t, root))
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	for _, workers := range []int{1, 2, 8} {
		for _, max := range []int{1, 2, 50, n / 2, n - 1, n} {
			x, err := scanWith(root, ScanOptions{MaxEntries: max}, workers)
			switch {
			case max < n && !errors.Is(err, ErrTooMany):
				t.Errorf("workers %d, bound %d of %d entries: %v, want ErrTooMany", workers, max, n, err)
			case max == n && (err != nil || x.Len() != n):
				t.Errorf("workers %d, bound %d of %d entries: %v", workers, max, n, err)
			}
			if now := openFDs(t); now != fds {
				t.Fatalf("workers %d, bound %d: %d fds open after the scan, %d before", workers, max, now, fds)
			}
		}
	}
	// A worker may still be on its way out after the scan returned.
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if now := runtime.NumGoroutine(); now > goroutines {
		t.Fatalf("%d goroutines after the scans, %d before", now, goroutines)
	}
}

// TestChangedIsEntryExact: after random changes to a hostile tree,
// Changed lists exactly the paths whose entry was added, removed, has
// another stat tuple or is racy in either probe, as the two plain walks
// show them; with the listings in files or in memory.
func TestChangedIsEntryExact(t *testing.T) {
	root := t.TempDir()
	hostileTree(t, root, 200, 3)
	rnd := rand.New(rand.NewPCG(5, 5))
	for _, keep := range []string{t.TempDir(), ""} {
		time.Sleep(2 * RacyWindow())
		prev, err := Scan(root, ScanOptions{Dir: keep})
		if err != nil {
			t.Fatal(err)
		}
		before := referenceScan(t, root)
		for round := range 8 {
			var paths []string
			for _, e := range before[1:] {
				paths = append(paths, e.path)
			}
			for range 1 + rnd.IntN(5) {
				p := filepath.Join(root, paths[rnd.IntN(len(paths))])
				switch rnd.IntN(3) {
				case 0:
					os.RemoveAll(p)
				case 1:
					if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
						os.WriteFile(p, []byte("x"), 0o644)
					}
				default:
					if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
						os.WriteFile(filepath.Join(p, fmt.Sprint("new", round)), nil, 0o644)
					}
				}
			}
			if round%2 == 0 {
				time.Sleep(2 * RacyWindow()) // odd rounds leave racy entries
			}
			x, err := Scan(root, ScanOptions{Dir: keep})
			if err != nil {
				t.Fatal(err)
			}
			after := referenceScan(t, root)
			got, err := x.Changed(prev)
			if err != nil {
				t.Fatal(err)
			}
			if want := refChanged(before, after, prev, x); !slices.Equal(got, want) {
				t.Fatalf("round %d: changed %q, want %q", round, got, want)
			}
			prev.Close()
			prev, before = x, after
		}
		prev.Close()
	}
}

// refChanged is Index.Changed computed from two plain walks.
func refChanged(before, after []refEntry, prev, x *Index) []string {
	old := map[string]Stat{}
	for _, e := range before {
		old[e.path] = e.st
	}
	var out []string
	for _, e := range after {
		st, ok := old[e.path]
		delete(old, e.path)
		if !ok || st != e.st || st.Racy(prev.Time, prev.Window) || e.st.Racy(x.Time, x.Window) {
			out = append(out, e.path)
		}
	}
	for p := range old {
		out = append(out, p)
	}
	slices.SortFunc(out, ComparePaths)
	return out
}
