package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/treediff"
)

// The tests build the merged view a run would leave as a plain directory
// tree and use it as the upper layer too: Apply reads from the upper layer
// only the regular files it copies and the mtimes of directories it writes
// into, and both are the merged view's. Entries come from the independent
// treediff oracle plus lstat, never from the overlay reader.

// applyTestState describes root/rel as the merged view's State; links
// holds the manifest node's other names for hard-linked files.
func applyTestState(t testing.TB, root, rel string, m treediff.Manifest) *attest.State {
	t.Helper()
	p := filepath.Join(root, rel)
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	s := &attest.State{
		Mode:    st.Mode & 07777,
		UID:     st.Uid,
		GID:     st.Gid,
		MtimeNS: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		s.Type, s.Size = attest.File, uint64(st.Size)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			t.Fatal(err)
		}
		f.Close()
		s.SHA256 = h.Sum(nil)
		if n, ok := m[rel]; ok && len(n.Links) > 0 {
			s.Link = attest.Path(rel)
			for _, l := range n.Links {
				if attest.Path(l) < s.Link {
					s.Link = attest.Path(l)
				}
			}
		}
	case unix.S_IFDIR:
		s.Type = attest.Dir
	case unix.S_IFLNK:
		s.Type, s.Size = attest.Symlink, uint64(st.Size)
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		s.Target = attest.Path(target)
	case unix.S_IFIFO:
		s.Type = attest.FIFO
	case unix.S_IFSOCK:
		s.Type = attest.Socket
	case unix.S_IFCHR:
		s.Type, s.Rdev = attest.CharDev, st.Rdev
	case unix.S_IFBLK:
		s.Type, s.Rdev = attest.BlockDev, st.Rdev
	}
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		t.Fatal(err)
	}
	var names []string
	for _, name := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
		if name != "" && !applyOverlayPrivate(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v := make([]byte, 64<<10)
		vn, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatal(err)
		}
		s.Xattrs = append(s.Xattrs, attest.Xattr{Name: name, Value: v[:vn]})
	}
	return s
}

// applyTestEntries lists how merged differs from lower, as a reader would.
func applyTestEntries(t testing.TB, lower, merged string) []attest.Entry {
	t.Helper()
	before, err := treediff.Walk(lower)
	if err != nil {
		t.Fatal(err)
	}
	after, err := treediff.Walk(merged)
	if err != nil {
		t.Fatal(err)
	}
	var out []attest.Entry
	for _, c := range treediff.Diff(before, after) {
		e := attest.Entry{Path: attest.Path(c.Path), Change: attest.Change(c.Change)}
		if c.Change != "added" {
			e.Old = applyTestState(t, lower, c.Path, before)
		}
		if c.Change != "deleted" {
			e.New = applyTestState(t, merged, c.Path, after)
		}
		out = append(out, e)
	}
	return out
}

func applyTestWrite(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func applyTestMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// applyTestCopy copies a tree with cp -a (hard links, xattrs and times kept).
func applyTestCopy(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}
}

// applyTestLower builds the workspace before the run.
func applyTestLower(t *testing.T, root string) {
	t.Helper()
	applyTestMust(t, os.MkdirAll(root, 0o755))
	w := func(rel, content string) { applyTestWrite(t, filepath.Join(root, rel), content, 0o644) }
	w("a.txt", "hello")
	w("b.txt", "bye")
	w("d/x", "x")
	w("d/sub/y", "y")
	w("e.txt", "meta")
	w("f", "becomes a symlink")
	w("g/y", "g is a dir for now")
	w("keep/k1", "k1")
	w("keep/k2", "k2")
	w("u.txt", "u")
	applyTestMust(t, unix.Setxattr(filepath.Join(root, "u.txt"), "user.color", []byte("blue"), 0))
	w("v.txt", "v")
	applyTestMust(t, os.Symlink("a.txt", filepath.Join(root, "lnk")))
	w("s/old", "replaced dir's old child")
	w("x", "x has a lower link y")
	applyTestMust(t, os.Link(filepath.Join(root, "x"), filepath.Join(root, "y")))
	w("h1", "lower link pair")
	applyTestMust(t, os.Link(filepath.Join(root, "h1"), filepath.Join(root, "h2")))
	w("q", "q gets a new smaller name p")
	// Fixed times, so that an unwanted change of any mtime shows.
	applyTestMust(t, filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		ts := []unix.Timespec{{Sec: 1_000_000_000}, {Sec: 1_000_000_000, Nsec: 123}}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}))
}

// applyTestMutate does what the agent does, on the merged view at root.
// copyUp makes a plain-directory simulation split hard links the way an
// overlay copy-up does; on a real overlay it is false.
func applyTestMutate(t *testing.T, root string, copyUp bool) {
	t.Helper()
	p := func(rel string) string { return filepath.Join(root, rel) }
	split := func(rel string) {
		if !copyUp {
			return
		}
		tmp := p(rel + ".split")
		applyTestMust(t, exec.Command("cp", "-a", p(rel), tmp).Run())
		applyTestMust(t, os.Rename(tmp, p(rel)))
	}
	applyTestWrite(t, p("a.txt"), "hello world", 0o644)
	applyTestMust(t, os.Remove(p("b.txt")))
	applyTestMust(t, os.RemoveAll(p("d")))
	applyTestMust(t, os.Chmod(p("e.txt"), 0o600))
	applyTestMust(t, unix.UtimesNanoAt(unix.AT_FDCWD, p("e.txt"), []unix.Timespec{{Sec: 5}, {Sec: 1_500_000_000, Nsec: 42}}, 0))
	applyTestMust(t, os.Remove(p("f")))
	applyTestMust(t, os.Symlink("a.txt", p("f")))
	applyTestMust(t, os.RemoveAll(p("g")))
	applyTestWrite(t, p("g"), "now a file", 0o640)
	// Written in place: keep's mtime does not change.
	f, err := os.OpenFile(p("keep/k2"), os.O_WRONLY|os.O_TRUNC, 0)
	applyTestMust(t, err)
	_, err = f.WriteString("k2 rewritten in place")
	applyTestMust(t, err)
	applyTestMust(t, f.Close())
	applyTestMust(t, unix.Removexattr(p("u.txt"), "user.color"))
	applyTestMust(t, unix.Setxattr(p("v.txt"), "user.new", []byte("value\x00with nul"), 0))
	applyTestMust(t, os.Remove(p("lnk")))
	applyTestMust(t, os.Symlink("b", p("lnk")))
	applyTestMust(t, os.RemoveAll(p("s")))
	applyTestWrite(t, p("s/new"), "new child", 0o600)
	applyTestWrite(t, p("n/deep/file.bin"), "\x00\x01binary\xff", 0o755)
	applyTestMust(t, os.Mkdir(p("n/empty"), 0o700))
	applyTestMust(t, os.Chmod(p("n"), 0o750))
	applyTestWrite(t, p("new\nline\xff name"), "odd name", 0o644)
	applyTestMust(t, os.Symlink("/absolute/target", p("n/abs")))
	// x had a lower link y; linking z copies x up, away from y.
	split("x")
	applyTestMust(t, os.Link(p("x"), p("z")))
	// h1 and h2 were one inode; chmod copies h1 up alone.
	split("h1")
	applyTestMust(t, os.Chmod(p("h1"), 0o640))
	// Two new names of one new inode.
	applyTestWrite(t, p("c1"), "new linked pair", 0o644)
	applyTestMust(t, os.Link(p("c1"), p("c2")))
	// p is a new, smaller name of the unchanged q.
	applyTestMust(t, os.Link(p("q"), p("p")))
	applyTestMust(t, os.Chmod(root, 0o751))
}

// applyTestScenario returns a pristine lower tree, the merged view after
// the agent's changes and the entries between them.
func applyTestScenario(t *testing.T) (lower, merged string, entries []attest.Entry) {
	t.Helper()
	base := t.TempDir()
	lower, merged = filepath.Join(base, "lower"), filepath.Join(base, "merged")
	applyTestLower(t, lower)
	applyTestCopy(t, lower, merged)
	applyTestMutate(t, merged, true)
	entries = applyTestEntries(t, lower, merged)
	for i := range entries {
		if entries[i].Path == "s" {
			entries[i].Change = attest.Replaced
		}
	}
	return lower, merged, entries
}

// applyTestLowerLink is want (the merged view) as Apply leaves it: x,
// which overlayfs split from its lower link y when the agent linked z to
// it, stays one inode with y, since y is not listed.
func applyTestLowerLink(want treediff.Manifest) treediff.Manifest {
	group := []string{"x", "y", "z"}
	for _, p := range group {
		n := want[p]
		n.Links = nil
		for _, q := range group {
			if q != p {
				n.Links = append(n.Links, q)
			}
		}
		want[p] = n
	}
	return want
}

func applyTestManifest(t *testing.T, root string) treediff.Manifest {
	t.Helper()
	m, err := treediff.Walk(root)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func applyTestEqual(t *testing.T, want treediff.Manifest, root string) {
	t.Helper()
	if d := treediff.Equal(want, applyTestManifest(t, root)); d != "" {
		t.Fatalf("workspace differs from the merged view: %s", d)
	}
}

func TestApplyScenario(t *testing.T) {
	lower, merged, entries := applyTestScenario(t)
	want := applyTestLowerLink(applyTestManifest(t, merged))
	changes := map[attest.Path]attest.Change{}
	for _, e := range entries {
		changes[e.Path] = e.Change
	}
	// The scenario covers what it claims to.
	for p, c := range map[attest.Path]attest.Change{
		"a.txt": attest.Modified, "b.txt": attest.Deleted, "d/sub/y": attest.Deleted,
		"e.txt": attest.Metadata, "f": attest.TypeChange, "g": attest.TypeChange,
		"g/y": attest.Deleted, "keep/k2": attest.Modified, "u.txt": attest.Metadata,
		"lnk": attest.Modified, "s": attest.Replaced, "n/empty": attest.Added,
		"z": attest.Added, "h1": attest.Metadata, "c2": attest.Added, "p": attest.Added,
		".": attest.Metadata,
	} {
		if changes[p] != c {
			t.Fatalf("scenario: %q is %q, want %q", p, changes[p], c)
		}
	}
	if _, listed := changes["keep"]; listed {
		t.Fatal("scenario: keep should be unchanged")
	}
	// Order must not matter.
	rand.New(rand.NewSource(1)).Shuffle(len(entries), func(i, j int) { entries[i], entries[j] = entries[j], entries[i] })
	var ops []string
	opt := ApplyOptions{Progress: func(op string, p attest.Path) { ops = append(ops, op+" "+string(p)) }}
	if err := Apply(merged, lower, entries, opt); err != nil {
		t.Fatal(err)
	}
	applyTestEqual(t, want, lower)
	if len(ops) == 0 {
		t.Fatal("Progress was never called")
	}
	// Applying again changes nothing that shows.
	if err := Apply(merged, lower, entries, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	applyTestEqual(t, want, lower)
}

// TestApplyCrashAtEveryStep stops Apply before each of its changes in turn,
// as a crash would, then runs it again and expects the exact merged view.
func TestApplyCrashAtEveryStep(t *testing.T) {
	pristine, merged, entries := applyTestScenario(t)
	want := applyTestLowerLink(applyTestManifest(t, merged))
	steps := 0
	probe := filepath.Join(t.TempDir(), "w")
	applyTestCopy(t, pristine, probe)
	if err := Apply(merged, probe, entries, ApplyOptions{Progress: func(string, attest.Path) { steps++ }}); err != nil {
		t.Fatal(err)
	}
	if steps < 50 {
		t.Fatalf("only %d steps: scenario too small", steps)
	}
	// -short (the kernel matrix's guests, where each step costs seconds)
	// crashes at the first steps, the last, and every fifth between.
	stride := 1
	if testing.Short() {
		stride = 5
	}
	for n := 1; n <= steps; n++ {
		if n > 3 && n < steps && n%stride != 0 {
			continue
		}
		ws := filepath.Join(t.TempDir(), "w")
		applyTestCopy(t, pristine, ws)
		err := Apply(merged, ws, entries, ApplyOptions{crashAt: func(step int) bool { return step == n }})
		var ae *ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, errApplyCrash) {
			t.Fatalf("crash at step %d: got %v", n, err)
		}
		// A second crash a little later in the re-run, then a full run.
		// Re-runs as the root package makes them (Resume) and without.
		resume := n%2 == 1
		err = Apply(merged, ws, entries, ApplyOptions{Resume: resume, crashAt: func(step int) bool { return step == n/2+1 }})
		if !errors.Is(err, errApplyCrash) {
			t.Fatalf("second crash at step %d: got %v", n/2+1, err)
		}
		if err := Apply(merged, ws, entries, ApplyOptions{Resume: resume}); err != nil {
			t.Fatalf("re-run after crash at step %d: %v", n, err)
		}
		if d := treediff.Equal(want, applyTestManifest(t, ws)); d != "" {
			t.Fatalf("after crash at step %d and re-run: %s", n, d)
		}
	}
}

// TestApplyResumeClearsTemp: a new file is linked at its own name when
// nothing is there, but a resumed run writes it through its temporary
// name, so it removes the one the run it resumes left: here a run that
// found a file in the way and stopped between linking the temporary name
// and renaming it over that file, which is gone since.
func TestApplyResumeClearsTemp(t *testing.T) {
	base := t.TempDir()
	ws, upper := filepath.Join(base, "ws"), filepath.Join(base, "upper")
	applyTestWrite(t, filepath.Join(ws, "new"), "in the way", 0o644)
	applyTestWrite(t, filepath.Join(upper, "new"), "new", 0o644)
	entries := []attest.Entry{{Path: "new", Change: attest.Added, New: applyTestState(t, upper, "new", nil)}}
	var last string
	err := Apply(upper, ws, entries, ApplyOptions{
		Progress: func(op string, _ attest.Path) { last = op },
		crashAt:  func(int) bool { return last == "rename" },
	})
	if !errors.Is(err, errApplyCrash) {
		t.Fatalf("crash before the rename: got %v", err)
	}
	names, err := filepath.Glob(filepath.Join(ws, applyTempPrefix+"*"))
	if err != nil || len(names) != 1 {
		t.Fatalf("want one temporary file left by the crash, got %q (%v)", names, err)
	}
	applyTestMust(t, os.Remove(filepath.Join(ws, "new")))
	if err := Apply(upper, ws, entries, ApplyOptions{Resume: true}); err != nil {
		t.Fatal(err)
	}
	if names, _ := filepath.Glob(filepath.Join(ws, applyTempPrefix+"*")); len(names) != 0 {
		t.Fatalf("the resumed run left %q", names)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "new")); err != nil || string(b) != "new" {
		t.Fatalf("new: %q, %v", b, err)
	}
}

func TestApplyRefusesDigestMismatch(t *testing.T) {
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	applyTestWrite(t, filepath.Join(lower, "t"), "old", 0o644)
	applyTestWrite(t, filepath.Join(upper, "t"), "new", 0o644)
	before := applyTestManifest(t, lower)
	evil := sha256.Sum256([]byte("bad"))
	st := applyTestState(t, upper, "t", nil)
	st.SHA256 = evil[:]
	err := Apply(upper, lower, []attest.Entry{{Path: "t", Change: attest.Modified, Old: st, New: st}}, ApplyOptions{})
	var ae *ApplyError
	if !errors.Is(err, ErrNotAttested) || !errors.As(err, &ae) || ae.Path != "t" || ae.Op != "verify" {
		t.Fatalf("got %v, want a verify ApplyError wrapping ErrNotAttested", err)
	}
	applyTestEqual(t, before, lower) // nothing replaced, no temporary file left

	// A size that differs is refused before anything changes.
	st = applyTestState(t, upper, "t", nil)
	st.Size++
	other := applyTestState(t, upper, "t", nil)
	err = Apply(upper, lower, []attest.Entry{
		{Path: "new-dir", Change: attest.Added, New: &attest.State{Type: attest.Dir, Mode: 0o755}},
		{Path: "t", Change: attest.Modified, Old: other, New: st},
	}, ApplyOptions{})
	if !errors.Is(err, ErrNotAttested) {
		t.Fatalf("got %v, want ErrNotAttested", err)
	}
	applyTestEqual(t, before, lower)
}

func TestApplyRefusesSymlinkComponent(t *testing.T) {
	base := t.TempDir()
	lower, upper, outside := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "outside")
	applyTestWrite(t, filepath.Join(outside, "victim"), "keep me", 0o644)
	applyTestMust(t, os.MkdirAll(lower, 0o755))
	applyTestMust(t, os.Symlink(outside, filepath.Join(lower, "evil")))
	applyTestWrite(t, filepath.Join(upper, "evil/x"), "planted", 0o644)
	applyTestWrite(t, filepath.Join(upper, "evil/victim"), "keep me", 0o777)
	outsideBefore := applyTestManifest(t, outside)
	x := applyTestState(t, upper, "evil/x", nil)
	victim := applyTestState(t, upper, "evil/victim", nil)
	for _, e := range []attest.Entry{
		{Path: "evil/x", Change: attest.Added, New: x},
		{Path: "evil/victim", Change: attest.Deleted, Old: x},
		{Path: "evil/victim", Change: attest.Metadata, Old: x, New: victim},
	} {
		err := Apply(upper, lower, []attest.Entry{e}, ApplyOptions{})
		var ae *ApplyError
		if !errors.As(err, &ae) || !errors.Is(err, unix.ELOOP) {
			t.Fatalf("%s %q: got %v, want an ApplyError wrapping ELOOP", e.Change, e.Path, err)
		}
		if d := treediff.Equal(outsideBefore, applyTestManifest(t, outside)); d != "" {
			t.Fatalf("%s %q changed a directory outside the workspace: %s", e.Change, e.Path, d)
		}
	}
}

func TestApplyRefusesMalformedEntries(t *testing.T) {
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	applyTestMust(t, os.MkdirAll(lower, 0o755))
	applyTestMust(t, os.MkdirAll(upper, 0o755))
	file := &attest.State{Type: attest.File, Mode: 0o644}
	for _, es := range [][]attest.Entry{
		{{Path: "../x", Change: attest.Added, New: file}},
		{{Path: "/x", Change: attest.Added, New: file}},
		{{Path: "a//b", Change: attest.Added, New: file}},
		{{Path: "x", Change: attest.Deleted, New: file}},
		{{Path: "x", Change: attest.Added}},
		{{Path: "x", Change: "renamed", New: file}},
		{{Path: "x", Change: attest.Added, New: file}, {Path: "x", Change: attest.Added, New: file}},
		{{Path: "x", Change: attest.Added, New: &attest.State{Type: attest.File, Mode: 0o170644}}},
		{{Path: "a", Change: attest.Added, New: &attest.State{Type: attest.File, Link: "b"}}},
		{{Path: ".", Change: attest.Deleted}},
	} {
		err := Apply(upper, lower, es, ApplyOptions{})
		var ae *ApplyError
		if !errors.As(err, &ae) || ae.Op != "check entry" {
			t.Fatalf("%+v: got %v, want a check entry error", es, err)
		}
	}
	if ents, _ := os.ReadDir(lower); len(ents) != 0 {
		t.Fatalf("malformed entries changed the workspace: %v", ents)
	}
}

func TestApplySparse(t *testing.T) {
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	applyTestMust(t, os.MkdirAll(lower, 0o755))
	applyTestMust(t, os.MkdirAll(upper, 0o755))
	mk := func(name string, size int64) {
		f, err := os.Create(filepath.Join(upper, name))
		applyTestMust(t, err)
		_, err = f.WriteAt([]byte("head"), 0)
		applyTestMust(t, err)
		_, err = f.WriteAt([]byte("middle"), size/2)
		applyTestMust(t, err)
		applyTestMust(t, f.Truncate(size))
		applyTestMust(t, f.Close())
	}
	// 128 MiB; 8 MiB in -short runs (the kernel matrix, whose emulated
	// guests hash a few MB/s): its holes still span several copy buffers,
	// and a dense copy would still allocate eight times the limit below.
	hashedSize := int64(128 << 20)
	if testing.Short() {
		hashedSize = 8 << 20
	}
	mk("hashed", hashedSize)
	mk("huge", 1<<40) // 1 TiB, over the digest cap: no SHA256
	hashed := applyTestState(t, upper, "hashed", nil)
	huge := &attest.State{Type: attest.File, Mode: 0o644, Size: 1 << 40}
	entries := []attest.Entry{
		{Path: "hashed", Change: attest.Added, New: hashed},
		{Path: "huge", Change: attest.Added, New: huge},
	}
	if err := Apply(upper, lower, entries, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hashed", "huge"} {
		var st unix.Stat_t
		applyTestMust(t, unix.Lstat(filepath.Join(lower, name), &st))
		if st.Blocks*512 > 1<<20 {
			t.Fatalf("%s: %d bytes allocated, want a sparse copy", name, st.Blocks*512)
		}
	}
	got := applyTestState(t, lower, "hashed", nil)
	if !bytes.Equal(got.SHA256, hashed.SHA256) || got.Size != hashed.Size {
		t.Fatalf("hashed: copy differs")
	}
	f, err := os.Open(filepath.Join(lower, "huge"))
	applyTestMust(t, err)
	defer f.Close()
	buf := make([]byte, 6)
	_, err = f.ReadAt(buf, 1<<39)
	applyTestMust(t, err)
	if fi, _ := f.Stat(); string(buf) != "middle" || fi.Size() != 1<<40 {
		t.Fatalf("huge: read %q at the middle, size %d", buf, fi.Size())
	}
}

// TestApplyClosesReadAhead: the upper files the read-ahead opened for
// writers that never came (a file refused half way stops the others) are
// closed when Apply returns.
func TestApplyClosesReadAhead(t *testing.T) {
	base := t.TempDir()
	ws, upper := filepath.Join(base, "ws"), filepath.Join(base, "upper")
	applyTestMust(t, os.MkdirAll(ws, 0o755))
	var entries []attest.Entry
	for i := range 300 {
		name := fmt.Sprintf("f%03d", i)
		applyTestWrite(t, filepath.Join(upper, name), name, 0o644)
		e := attest.Entry{Path: attest.Path(name), Change: attest.Added, New: applyTestState(t, upper, name, nil)}
		if i == 20 {
			e.New.SHA256 = make([]byte, sha256.Size) // refused
		}
		entries = append(entries, e)
	}
	openFDs := func() int {
		names, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(names)
	}
	before := openFDs()
	if err := Apply(upper, ws, entries, ApplyOptions{}); !errors.Is(err, ErrNotAttested) {
		t.Fatalf("got %v, want ErrNotAttested", err)
	}
	if after := openFDs(); after != before {
		t.Fatalf("%d descriptors open after Apply, %d before", after, before)
	}
}
