package overlay

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
)

// TestReadHashesInodeOnce: a file with many names is hashed once per read.
func TestReadHashesInodeOnce(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	body := bytes.Repeat([]byte("x"), 1<<20)
	if err := os.WriteFile(filepath.Join(upper, "f"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := os.Link(filepath.Join(upper, "f"), filepath.Join(upper, fmt.Sprintf("l%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := Read(upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Stats.BytesHashed != 1<<20 {
		t.Errorf("%d bytes hashed; want %d", ch.Stats.BytesHashed, 1<<20)
	}
	files := 0
	for _, e := range ch.Entries {
		if e.New.Type != attest.File {
			continue
		}
		files++
		if !bytes.Equal(e.New.SHA256, ch.Entries[len(ch.Entries)-1].New.SHA256) || e.New.SHA256 == nil {
			t.Errorf("%s: digest %x", e.Path, e.New.SHA256)
		}
	}
	if files != 51 {
		t.Errorf("%d files listed, want 51", files)
	}
}

// TestReadPathBounds: a path over the length limit is not examined, with
// its subtree; listed paths past the path bytes budget stop the read.
func TestReadPathBounds(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	name := strings.Repeat("d", 200)
	deep := upper
	for range 8 {
		deep = filepath.Join(deep, name)
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	ch, err := Read(upper, lower, ReadOptions{MaxPathLen: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ch.Incomplete = withoutNoMountID(ch.Incomplete)
	// Four levels of 200, 401, 602 and 803 bytes; the fifth is 1004. (The
	// root is listed where its metadata differs from the lower root's.)
	if nonRoot(ch.Entries) != 4 || len(ch.Incomplete) != 1 || ch.Incomplete[0].Code != attest.PathLimit || len(ch.Incomplete[0].Path) != 5*201-1 {
		t.Errorf("length limit: %d entries, reasons %+v", len(ch.Entries), ch.Incomplete)
	}
	ch, err = Read(upper, lower, ReadOptions{MaxPathBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ch.Incomplete = withoutNoMountID(ch.Incomplete)
	// 0 + 200 + 401 + 602 bytes: the fourth entry passes 1000.
	if nonRoot(ch.Entries) != 3 || len(ch.Incomplete) != 1 || ch.Incomplete[0].Code != attest.PathLimit {
		t.Errorf("bytes budget: %d entries, reasons %+v", len(ch.Entries), ch.Incomplete)
	}
}

// withoutNoMountID drops the reason a kernel without statx mount IDs adds
// to every read (the kernel matrix runs these tests so too).
func withoutNoMountID(rs []attest.Reason) []attest.Reason {
	return slices.DeleteFunc(rs, func(r attest.Reason) bool { return r.Code == attest.NoMountID })
}

// nonRoot counts the entries other than the workspace root.
func nonRoot(es []attest.Entry) int {
	n := 0
	for _, e := range es {
		if e.Path != attest.Root {
			n++
		}
	}
	return n
}
