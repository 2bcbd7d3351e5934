package review

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// file is a test tree's entry: contents, or a symlink's target when link.
type file struct {
	data string
	exec bool
	link bool
}

func (f *file) side() Side {
	if f == nil {
		return Side{}
	}
	s := Side{Mode: ModeFile, Data: []byte(f.data), Size: uint64(len(f.data))}
	switch {
	case f.link:
		s.Mode = ModeSymlink
	case f.exec:
		s.Mode = ModeExec
	}
	return s
}

func writeTree(t *testing.T, dir string, tree map[string]*file) {
	t.Helper()
	for p, f := range tree {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Remove(full)
		var err error
		switch {
		case f == nil:
			err = os.Remove(full)
			if os.IsNotExist(err) {
				err = nil
			}
		case f.link:
			err = os.Symlink(f.data, full)
		case f.exec:
			err = os.WriteFile(full, []byte(f.data), 0o755)
		default:
			err = os.WriteFile(full, []byte(f.data), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "core.quotePath=true", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, stderr.String())
	}
	return out.String()
}

// lines makes n lines of text, line i being "line i" unless changed.
func lines(n int, changed map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := changed[i]; ok {
			b.WriteString(s)
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// TestPatchIsGits: the patch of a change set is byte for byte the one git
// writes for the same change (`git diff --cached --full-index`), `git
// apply --check` takes it against the old tree, and `git apply` makes
// the new tree: names with a newline, invalid UTF-8, a quote, a
// backslash, a space and a leading dash; modes; symlinks; a file turned
// into a symlink; files without a final newline; empty files.
func TestPatchIsGits(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	old := map[string]*file{
		"a.txt":           {data: lines(40, nil)},
		"del.txt":         {data: "gone\n"},
		"exec.sh":         {data: "#!/bin/sh\n", exec: false},
		"link":            {data: "a.txt", link: true},
		"tolink":          {data: "was a file\n"},
		"nonl":            {data: "no newline"},
		"dir/deep/x":      {data: "x\n"},
		"quote\"back\\sl": {data: "q\n"},
		"empty-old":       {data: ""},
	}
	change := map[string]*file{
		"a.txt":           {data: lines(41, map[int]string{3: "three\n", 30: "thirty\n"})},
		"del.txt":         nil,
		"exec.sh":         {data: "#!/bin/sh\n", exec: true},
		"link":            {data: "dir/deep/x", link: true},
		"tolink":          {data: "a.txt", link: true},
		"nonl":            {data: "no newline, changed"},
		"dir/deep/x":      nil,
		"dir/deep/y":      {data: "y\n"},
		"new\nline":       {data: "newline in the name\n"},
		"bad\xff\xfe":     {data: "invalid UTF-8\n"},
		"-dash":           {data: "leading dash\n"},
		"sp ace":          {data: "a space\n"},
		"quote\"back\\sl": {data: "q2\n"},
		"empty-new":       {data: ""},
		"empty-old":       nil,
		"multi":           {data: lines(5, nil)},
	}
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	writeTree(t, repo, old)
	git(t, repo, "init", "-q")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "old")

	paths := make([]string, 0, len(change))
	for p := range change {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var patch bytes.Buffer
	var stats []FileStat
	for _, p := range paths {
		d, err := Compare(FilePair{Path: attest.Path(p), Old: old[p].side(), New: change[p].side()})
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, d.Stat())
		if err := d.WritePatch(&patch); err != nil {
			t.Fatal(err)
		}
	}
	pf := filepath.Join(dir, "p.patch")
	if err := os.WriteFile(pf, patch.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, repo, "apply", "--check", pf)
	git(t, repo, "apply", pf)
	want := filepath.Join(dir, "want")
	writeTree(t, want, old)
	writeTree(t, want, change)
	for _, p := range paths {
		got, gerr := os.Lstat(filepath.Join(repo, p))
		exp, werr := os.Lstat(filepath.Join(want, p))
		if (gerr == nil) != (werr == nil) || gerr == nil && got.Mode() != exp.Mode() {
			t.Errorf("%q after git apply: %v %v, want %v %v", p, got, gerr, exp, werr)
			continue
		}
		if gerr == nil && got.Mode().IsRegular() {
			a, _ := os.ReadFile(filepath.Join(repo, p))
			b, _ := os.ReadFile(filepath.Join(want, p))
			if !bytes.Equal(a, b) {
				t.Errorf("%q after git apply holds %q, want %q", p, a, b)
			}
		}
	}
	git(t, repo, "add", "-A")
	if gits := git(t, repo, "diff", "--cached", "--full-index", "--no-renames"); gits != patch.String() {
		t.Errorf("the patch differs from git's:\n--- ours\n%s\n--- git's\n%s", patch.String(), gits)
	}
	var stat bytes.Buffer
	WriteStat(&stat, stats, 80)
	if gits := git(t, repo, "diff", "--cached", "--stat=80", "--no-renames"); gits != stat.String() {
		t.Errorf("the diffstat differs from git's:\n--- ours\n%s\n--- git's\n%s", stat.String(), gits)
	}
}

// TestStatScaled: a change larger than the graph is scaled as git
// scales it, and long names are shortened as git shortens them.
func TestStatScaled(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("long-directory-name/", 4) + "file.txt"
	writeTree(t, dir, map[string]*file{"big": {data: lines(300, nil)}, long: {data: lines(10, nil)}, "bin": {data: "\x00"}})
	git(t, dir, "init", "-q")
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-qm", "old")
	change := map[string]*file{"big": {data: lines(10, nil)}, long: {data: lines(12, map[int]string{1: "one\n"})}, "bin": {data: "\x00\x01"}}
	writeTree(t, dir, change)
	old := map[string]*file{"big": {data: lines(300, nil)}, long: {data: lines(10, nil)}, "bin": {data: "\x00"}}
	var stats []FileStat
	for _, p := range []string{"big", "bin", long} {
		d, err := Compare(FilePair{Path: attest.Path(p), Old: old[p].side(), New: change[p].side()})
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, d.Stat())
	}
	var stat bytes.Buffer
	WriteStat(&stat, stats, 80)
	git(t, dir, "add", "-A")
	if gits := git(t, dir, "diff", "--cached", "--stat=80"); gits != stat.String() {
		t.Errorf("the diffstat differs from git's:\n--- ours\n%s\n--- git's\n%s", stat.String(), gits)
	}
}

// TestRenameAndBinary: an exact rename is written as git writes it, and
// `git apply` carries it out; a binary file is noted by size and digest
// in a line `git apply` reads as git's binary note.
func TestRenameAndBinary(t *testing.T) {
	dir := t.TempDir()
	repo := filepath.Join(dir, "repo")
	body := lines(20, nil)
	writeTree(t, repo, map[string]*file{"from.txt": {data: body}, "bin": {data: "a\x00b"}})
	git(t, repo, "init", "-q")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "old")

	var patch bytes.Buffer
	d, err := Compare(FilePair{Path: "to dir/to.txt", From: "from.txt", Old: (&file{data: body}).side(), New: (&file{data: body}).side()})
	if err != nil {
		t.Fatal(err)
	}
	d.WritePatch(&patch)
	if s := d.Stat().name(); s != "from.txt => to dir/to.txt" {
		t.Errorf("stat name %q", s)
	}
	bin, err := Compare(FilePair{Path: "bin", Old: (&file{data: "a\x00b"}).side(), New: (&file{data: "a\x00c"}).side()})
	if err != nil {
		t.Fatal(err)
	}
	bin.WritePatch(&patch)
	if !bin.Binary || bin.Added != 0 {
		t.Errorf("binary file: %+v", bin)
	}
	newSum := sha256.Sum256([]byte("a\x00c"))
	for _, want := range []string{
		"diff --git a/from.txt b/to dir/to.txt\nsimilarity index 100%\nrename from from.txt\nrename to to dir/to.txt\n",
		fmt.Sprintf("Binary files a/bin (3 bytes, sha256:%x) and b/bin (3 bytes, sha256:%x) differ\n", sha256.Sum256([]byte("a\x00b")), newSum),
	} {
		if !strings.Contains(patch.String(), want) {
			t.Errorf("patch lacks %q:\n%s", want, patch.String())
		}
	}
	pf := filepath.Join(dir, "p.patch")
	os.WriteFile(pf, patch.Bytes(), 0o644)
	// git reads the binary note as its own: it refuses to apply it for
	// want of the bytes, as it refuses git's.
	cmd := exec.Command("git", "apply", "--check", pf)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "binary patch") {
		t.Errorf("git apply of a binary note: %v: %s", err, out)
	}
	git(t, repo, "apply", "--exclude=bin", pf)
	if b, err := os.ReadFile(filepath.Join(repo, "to dir", "to.txt")); err != nil || string(b) != body {
		t.Errorf("renamed file: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(repo, "from.txt")); !os.IsNotExist(err) {
		t.Errorf("the rename's old path is still there: %v", err)
	}
}

// TestPatchColor: a coloured patch is the plain one with git's colours
// around its lines, and Escape reaches every line of file content (an
// escape sequence in a file cannot reach a terminal raw).
func TestPatchColor(t *testing.T) {
	d, err := Compare(FilePair{Path: "f", Old: (&file{data: "a\nold\x1b]0;title\x07\n"}).side(), New: (&file{data: "a\nnew\n"}).side()})
	if err != nil {
		t.Fatal(err)
	}
	var plain, colored bytes.Buffer
	d.WritePatch(&plain)
	c := *GitColors
	d.WritePatchColor(&colored, &c)
	strip := strings.NewReplacer(c.Meta, "", c.Frag, "", c.Old, "", c.New, "", c.Reset, "")
	if strip.Replace(colored.String()) != plain.String() || !strings.Contains(colored.String(), c.Old+"-old") || !strings.Contains(colored.String(), c.Meta+"diff --git a/f b/f"+c.Reset+"\n") {
		t.Errorf("coloured patch:\n%q\nplain:\n%q", colored.String(), plain.String())
	}
	c.Escape = func(s string) string { return strings.ReplaceAll(s, "\x1b", "^[") }
	colored.Reset()
	d.WritePatchColor(&colored, &c)
	if strings.Contains(strip.Replace(colored.String()), "\x1b") {
		t.Errorf("an escape byte of the file's reached the output: %q", colored.String())
	}
}
