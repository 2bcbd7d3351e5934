package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(a, "old"), []byte("before"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := []File{
		{Path: filepath.Join(a, "old"), Data: []byte("after"), Perm: 0o600},
		{Path: filepath.Join(a, "missing", "x"), Data: []byte("x"), Perm: 0o644},
		{Path: filepath.Join(b, "new"), Data: []byte("new"), Perm: 0o644},
	}
	errs := WriteFiles(files)
	if len(errs) != len(files) {
		t.Fatalf("%d errors for %d files", len(errs), len(files))
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("errors %v, want the files in existing dirs written", errs)
	}
	if !errors.Is(errs[1], os.ErrNotExist) {
		t.Fatalf("file in a missing dir: %v, want ErrNotExist", errs[1])
	}
	for _, f := range []File{files[0], files[2]} {
		got, err := os.ReadFile(f.Path)
		if err != nil || !bytes.Equal(got, f.Data) {
			t.Errorf("%s holds %q, %v; want %q", f.Path, got, err, f.Data)
		}
		if fi, err := os.Stat(f.Path); err != nil || fi.Mode().Perm() != f.Perm {
			t.Errorf("%s: mode %v, %v; want %v", f.Path, fi.Mode().Perm(), err, f.Perm)
		}
	}
	for _, d := range []string{a, b} {
		ents, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s holds %q: a temporary file was left behind", d, names)
		}
	}
}

// TestWriteFilesRenameFails: a target that cannot be replaced (a
// directory) fails alone, and its temporary file is removed.
func TestWriteFilesRenameFails(t *testing.T) {
	d := t.TempDir()
	if err := os.Mkdir(filepath.Join(d, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "dir", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	errs := WriteFiles([]File{{Path: filepath.Join(d, "dir"), Data: []byte("x"), Perm: 0o644}, {Path: filepath.Join(d, "ok"), Data: []byte("y"), Perm: 0o644}})
	if errs[0] == nil || errs[1] != nil {
		t.Fatalf("errors %v, want only the first", errs)
	}
	ents, _ := os.ReadDir(d)
	if len(ents) != 2 {
		t.Errorf("%d entries in %s, want dir and ok: a temporary was left", len(ents), d)
	}
}

// BenchmarkFiveFiles writes five files of 3 KB into two directories, as a
// session writes its statement: one by one with Write, and together with
// WriteFiles. The directories are under the test's temporary dir, so the
// figures are those of its filesystem.
func BenchmarkFiveFiles(b *testing.B) {
	dirs := []string{b.TempDir(), b.TempDir()}
	data := make([]byte, 3000)
	files := func(n int) []File {
		var fs []File
		for i := range 5 {
			fs = append(fs, File{Path: filepath.Join(dirs[i%2], fmt.Sprintf("f%d-%d", n, i)), Data: data, Perm: 0o600})
		}
		return fs
	}
	b.Run("one-by-one", func(b *testing.B) {
		for n := range b.N {
			for _, f := range files(n) {
				if err := Write(f.Path, f.Data, f.Perm); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("together", func(b *testing.B) {
		for n := range b.N {
			for _, err := range WriteFiles(files(n)) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
