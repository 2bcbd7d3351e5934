package gitindex

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// repo makes a git repository with a few committed files and returns
// its work tree and a function that runs git in it.
func repo(t testing.TB, args ...string) (string, func(...string) string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("these tests need git: %v", err)
	}
	dir := t.TempDir()
	git := func(a ...string) string {
		t.Helper()
		cmd := exec.Command("git", a...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(a, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(append([]string{"init", "-q"}, args...)...)
	for _, f := range []string{"a.sh", "b.txt", "dir/c.go"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	// A path longer than the 12 bits of an entry's length hold.
	blob := git("hash-object", "-w", "b.txt")
	git("update-index", "--add", "--cacheinfo", "100644,"+blob+","+longPath)
	git("commit", "-qm", "one")
	return dir, git
}

var longPath = strings.Repeat("d123456789/", 400) + "f"

func read(t testing.TB, dir string) *Index {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := Parse(b)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return ix
}

func find(ix *Index, path string) *Entry {
	for i := range ix.Entries {
		if string(ix.Entries[i].Path) == path {
			return &ix.Entries[i]
		}
	}
	return nil
}

// TestRealGit reads indexes git wrote, in each version, with the flags
// and entries git writes.
func TestRealGit(t *testing.T) {
	for _, tc := range []struct {
		name string
		init []string
		hash Hash
	}{
		{"sha1", nil, SHA1},
		{"sha256", []string{"--object-format=sha256"}, SHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, git := repo(t, tc.init...)
			ix := read(t, dir)
			if ix.Version != 2 || ix.Hash != tc.hash || len(ix.Entries) != 5 {
				t.Fatalf("version %d hash %d, %d entries; want 2, %d, 5", ix.Version, ix.Hash, len(ix.Entries), tc.hash)
			}
			long := longPath
			head := git("rev-parse", "HEAD")
			git("update-index", "--skip-worktree", "a.sh")
			git("update-index", "--assume-unchanged", "b.txt")
			git("update-index", "--add", "--cacheinfo", "160000,"+head+",node_modules/evil")
			for _, v := range []int{3, 4, 2} {
				if v == 2 {
					// Version 2 cannot hold skip-worktree.
					git("update-index", "--no-skip-worktree", "a.sh")
				}
				git("update-index", "--index-version", string(rune('0'+v)))
				ix := read(t, dir)
				if ix.Version != v || len(ix.Entries) != 6 {
					t.Fatalf("version %d, %d entries; want %d, 6", ix.Version, len(ix.Entries), v)
				}
				a, b, l, g, s := find(ix, "a.sh"), find(ix, "b.txt"), find(ix, long), find(ix, "node_modules/evil"), find(ix, "link")
				if a == nil || b == nil || l == nil || g == nil || s == nil {
					t.Fatalf("v%d: entries missing: %q", v, paths(ix))
				}
				if a.SkipWorktree != (v >= 3) || a.AssumeValid || !b.AssumeValid || b.SkipWorktree || l.AssumeValid || l.SkipWorktree {
					t.Fatalf("v%d: flags: a.sh %+v, b.txt %+v", v, a, b)
				}
				if g.Mode != ModeGitlink || hexOf(g.OID) != head || a.Mode != ModeFile || s.Mode != ModeSymlink {
					t.Fatalf("v%d: gitlink %o %x, a.sh %o, link %o", v, g.Mode, g.OID, a.Mode, s.Mode)
				}
			}
		})
	}
}

// TestSkipHash: git's index.skipHash writes zeros for the checksum.
func TestSkipHash(t *testing.T) {
	for _, tc := range []struct {
		init []string
		hash Hash
	}{{nil, SHA1}, {[]string{"--object-format=sha256"}, SHA256}} {
		dir, git := repo(t, tc.init...)
		git("update-index", "--assume-unchanged", "b.txt")
		b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
		if err != nil {
			t.Fatal(err)
		}
		clear(b[len(b)-int(tc.hash):])
		ix, err := Parse(b)
		if err != nil || ix.Hash != tc.hash || !find(ix, "b.txt").AssumeValid {
			t.Errorf("%d: Parse: %v", tc.hash, err)
		}
		b[12+26] ^= 1 // the first entry's mode
		if _, err := Parse(b); err == nil {
			t.Errorf("%d: Parse accepted a damaged index without a checksum", tc.hash)
		}
	}
}

// TestSplitIndex: an index whose entries live in a shared index is
// refused, not read as empty.
func TestSplitIndex(t *testing.T) {
	dir, git := repo(t)
	git("update-index", "--split-index")
	b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Parse of a split index: %v, want ErrUnsupported", err)
	}
}

// TestSparseIndex: an index whose directory entries stand for whole
// subtrees is refused, not read as a few entries.
func TestSparseIndex(t *testing.T) {
	dir, git := repo(t)
	git("sparse-checkout", "set", "--cone", "--sparse-index", "dir")
	git("sparse-checkout", "set", "dir")
	b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Parse of a sparse index: %v, want ErrUnsupported", err)
	}
	git("sparse-checkout", "disable")
	if ix := read(t, dir); find(ix, "dir/c.go") == nil {
		t.Fatalf("after sparse-checkout disable: %q", paths(ix))
	}
}

// TestRefuses: damaged or crafted indexes are errors.
func TestRefuses(t *testing.T) {
	dir, git := repo(t)
	git("update-index", "--skip-worktree", "a.sh")
	good, err := os.ReadFile(filepath.Join(dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	body := good[:len(good)-20]
	seal := func(b []byte) []byte {
		s := sha1.Sum(b)
		return append(bytes.Clone(b), s[:]...)
	}
	set := func(off int, v ...byte) []byte {
		b := bytes.Clone(body)
		copy(b[off:], v)
		return seal(b)
	}
	first := 12 // the first entry
	for name, b := range map[string][]byte{
		"checksum":       append(bytes.Clone(body), bytes.Repeat([]byte{1}, 20)...),
		"signature":      set(0, 'D', 'I', 'R', 'D'),
		"version 5":      set(4, 0, 0, 0, 5),
		"version 2":      set(4, 0, 0, 0, 2), // extended flags in v2
		"count":          set(8, 0xff, 0xff, 0xff, 0xff),
		"count+1":        set(8, 0, 0, 0, byte(binary.BigEndian.Uint32(body[8:])+1)),
		"mode":           set(first+24, 0, 0, 0o100, 0),
		"name length":    set(first+60, 0, 3),
		"unknown xflag":  set(first+62, 0x10, 0),
		"required ext":   seal(append(bytes.Clone(body), 'a', 'b', 'c', 'd', 0, 0, 0, 0)),
		"link ext":       seal(append(bytes.Clone(body), 'l', 'i', 'n', 'k', 0, 0, 0, 0)),
		"sdir ext":       seal(append(bytes.Clone(body), 's', 'd', 'i', 'r', 0, 0, 0, 0)),
		"ext past end":   seal(append(bytes.Clone(body), 'T', 'R', 'E', 'F', 0, 0, 1, 0)),
		"trailing bytes": seal(append(bytes.Clone(body), 1, 2, 3)),
		"empty":          nil,
		"short":          seal([]byte("DIRC")),
	} {
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: Parse accepted it", name)
		}
	}
	// Out of order: swap two entries' paths of equal length.
	ix, err := Parse(good)
	if err != nil || string(ix.Entries[0].Path) != "a.sh" {
		t.Fatalf("Parse: %v, first %q", err, ix.Entries[0].Path)
	}
	i := bytes.Index(body, []byte("a.sh\x00"))
	j := bytes.Index(body, []byte("b.txt\x00"))
	b := bytes.Clone(body)
	copy(b[i:], "b.sh")
	copy(b[j:], "a.txt")
	if _, err := Parse(seal(b)); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("Parse of entries out of order: %v", err)
	}
	if _, err := Parse(make([]byte, MaxSize+1)); err == nil {
		t.Error("Parse accepted more than MaxSize bytes")
	}
}

func TestVarint(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want uint64
	}{
		{[]byte{0}, 0}, {[]byte{0x7f}, 127}, {[]byte{0x80, 0}, 128}, {[]byte{0x80, 0x7f}, 255}, {[]byte{0x81, 0}, 256},
	} {
		v, n, err := varint(tc.in)
		if err != nil || v != tc.want || n != len(tc.in) {
			t.Errorf("varint(%x) = %d, %d, %v; want %d", tc.in, v, n, err, tc.want)
		}
	}
	if _, _, err := varint(bytes.Repeat([]byte{0xff}, 12)); err == nil {
		t.Error("varint accepted an overflow")
	}
}

// FuzzParse: Parse never panics, and what it accepts is sorted and
// within its limits.
func FuzzParse(f *testing.F) {
	dir, git := repo(f)
	head := git("rev-parse", "HEAD")
	git("update-index", "--assume-unchanged", "b.txt")
	git("update-index", "--add", "--cacheinfo", "160000,"+head+",node_modules/evil")
	for _, v := range []string{"2", "3", "4"} {
		git("update-index", "--index-version", v)
		if v == "3" {
			git("update-index", "--skip-worktree", "a.sh")
		}
		b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-20]) // its body, for parse
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ix, err := Parse(b)
		if err == nil {
			check(t, ix)
		}
		// The body as it is, past the checksum.
		if len(b) >= 12 {
			for _, h := range []Hash{SHA1, SHA256} {
				if ix, err := parse(b, h); err == nil {
					check(t, ix)
				}
			}
		}
	})
}

func check(t *testing.T, ix *Index) {
	{
		if len(ix.Entries) > MaxEntries || ix.Version < 2 || ix.Version > 4 {
			t.Fatalf("version %d, %d entries", ix.Version, len(ix.Entries))
		}
		for i, e := range ix.Entries {
			if len(e.Path) == 0 || bytes.IndexByte(e.Path, 0) >= 0 || len(e.OID) != int(ix.Hash) {
				t.Fatalf("entry %d: %+v", i, e)
			}
			if i > 0 && bytes.Compare(ix.Entries[i-1].Path, e.Path) > 0 {
				t.Fatalf("entry %d out of order", i)
			}
		}
	}
}

func paths(ix *Index) []string {
	var out []string
	for _, e := range ix.Entries {
		out = append(out, string(e.Path))
	}
	return out
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestPathBomb: version 4 lets each entry repeat the previous path and
// add a byte; the paths' total is capped, not allocated.
func TestPathBomb(t *testing.T) {
	const n = 70000
	first := strings.Repeat("p", 4096)
	var b bytes.Buffer
	b.WriteString("DIRC")
	binary.Write(&b, binary.BigEndian, []uint32{4, n})
	for i := range n {
		var fixed [40 + 20 + 2]byte
		binary.BigEndian.PutUint32(fixed[24:], ModeFile)
		binary.BigEndian.PutUint16(fixed[60:], 0xfff)
		b.Write(fixed[:])
		if i == 0 {
			b.WriteString("\x00" + first + "\x00")
		} else {
			b.WriteString("\x00q\x00") // remove nothing, add "q"
		}
	}
	s := sha1.Sum(b.Bytes())
	b.Write(s[:])
	if _, err := Parse(b.Bytes()); err == nil || !strings.Contains(err.Error(), "the paths hold more than") {
		t.Fatalf("Parse: %v", err)
	}
}
