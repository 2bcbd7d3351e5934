package probe

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDiskUsage: the blocks allocated, as du counts them: every directory,
// a hard-linked file once, a sparse file's holes not at all, a symlink's
// own blocks and not its target's; and it refuses a root it cannot open.
func TestDiskUsage(t *testing.T) {
	root := t.TempDir()
	other := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "a/b/c"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a/b/c/data"), make([]byte, 1<<20), 0o644))
	must(os.Link(filepath.Join(root, "a/b/c/data"), filepath.Join(root, "a/linked")))
	sparse, err := os.Create(filepath.Join(root, "sparse"))
	must(err)
	must(sparse.Truncate(1 << 40))
	sparse.Close()
	must(os.WriteFile(filepath.Join(other, "big"), make([]byte, 4<<20), 0o644))
	must(os.Symlink(other, filepath.Join(root, "a/to-other")))
	must(os.WriteFile(filepath.Join(root, "name\nwith\xffbytes"), []byte("x"), 0o644))

	// What du would say, counted independently.
	var want, entries int64
	seen := map[uint64]bool{}
	must(filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		entries++
		if !seen[st.Ino] {
			seen[st.Ino] = true
			want += st.Blocks * 512
		}
		return nil
	}))
	u, err := DiskUsage(root)
	must(err)
	if u.Bytes != want || u.Entries != entries {
		t.Errorf("DiskUsage = %d bytes, %d entries; want %d, %d", u.Bytes, u.Entries, want, entries)
	}
	if u.Bytes < 1<<20 || u.Bytes > 1<<20+1<<18 {
		t.Errorf("DiskUsage = %d bytes: not the 1 MiB file once, and little else", u.Bytes)
	}
	both, err := DiskUsage(root, other)
	must(err)
	if both.Bytes < u.Bytes+4<<20 {
		t.Errorf("DiskUsage of both roots = %d bytes, want at least %d", both.Bytes, u.Bytes+4<<20)
	}
	if _, err := DiskUsage(filepath.Join(root, "missing")); err == nil {
		t.Error("a missing root measured")
	}
	if _, err := DiskUsage(filepath.Join(root, "a/to-other")); err == nil {
		t.Error("a symlinked root followed")
	}
}
