package overlay

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
)

// TestReadExclude summarizes excluded subtrees: counted entries and bytes,
// no entries listed for them, nothing incomplete, everything else as usual.
func TestReadExclude(t *testing.T) {
	base := t.TempDir()
	upper, lower := filepath.Join(base, "upper"), filepath.Join(base, "lower")
	files := map[string]string{
		"node_modules/a": "abc", "node_modules/b/c": "hello", "node_modules/b/d/e": "",
		"src/x.go": "x", "build/out/bin": "0123456789",
	}
	for name, data := range files {
		p := filepath.Join(upper, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(lower, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(filepath.Join(upper, "node_modules", string(rune('p'+i))), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The merged root is the upper root: give it the lower root's times, as
	// a mount does, so "." is not a change.
	var st unix.Stat_t
	if err := unix.Lstat(lower, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, upper, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	excl := map[attest.Path]bool{"node_modules": true, "build/out": true}
	ch, err := Read(upper, lower, ReadOptions{Exclude: func(p attest.Path) bool { return excl[p] }})
	if err != nil {
		t.Fatal(err)
	}
	want := []attest.Excluded{{Path: "build/out", Entries: 2, Bytes: 10}, {Path: "node_modules", Entries: 9, Bytes: 8}}
	if !reflect.DeepEqual(ch.Excluded, want) {
		t.Errorf("excluded = %+v, want %+v", ch.Excluded, want)
	}
	var paths []attest.Path
	for _, e := range ch.Entries {
		paths = append(paths, e.Path)
	}
	if !reflect.DeepEqual(paths, []attest.Path{"build", "src", "src/x.go"}) {
		t.Errorf("entries = %q", paths)
	}
	for _, r := range ch.Incomplete {
		if r.Code != attest.NoMountID {
			t.Errorf("incomplete: %+v", r)
		}
	}
	if ch.Stats.BytesHashed != 1 {
		t.Errorf("hashed %d bytes, want 1 (only src/x.go)", ch.Stats.BytesHashed)
	}

	// A directory over the per-directory limit inside an exclusion is
	// still a reason: the count is not complete.
	ch, err = Read(upper, lower, ReadOptions{MaxDirEntries: 3, Exclude: func(p attest.Path) bool { return excl[p] }})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range ch.Incomplete {
		found = found || r.Code == attest.DirEntryLimit && r.Path == "node_modules"
	}
	if !found {
		t.Errorf("no dir-entry-limit reason for node_modules: %+v", ch.Incomplete)
	}
}
