package probe

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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
	for i := range x.Len() {
		got = append(got, x.Path(i))
	}
	want := []string{".", "a", "a/x", "a-b", "a.c", "a0", "b", "b/c", "b/c/d", "fifo", "link", "new\nline", "\xff"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %q, want %q", got, want)
	}
	if !slices.IsSortedFunc(got, ComparePaths) {
		t.Error("scan order is not ComparePaths order")
	}
	for i, p := range want {
		if x.Find(p) != i {
			t.Errorf("Find(%q) = %d, want %d", p, x.Find(p), i)
		}
	}
	for _, p := range []string{"a/y", "b/c/d/e", "zz", ""} {
		if x.Find(p) != -1 {
			t.Errorf("Find(%q) found something", p)
		}
	}
	if per := x.Bytes() / x.Len(); per > recordSize+16 {
		t.Errorf("%d bytes per entry", per)
	}
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
		i := x.Find("f")
		if x.Stat(i).Ino == before.Stat(before.Find("f")).Ino {
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
