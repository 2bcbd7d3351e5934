package layerseal

import (
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// TestDigestCacheBlocks: a cache of many blocks answers every lookup by
// path and exact stat, and one built from it takes over the records of
// files the walk did not see, in any block, and drops the rest.
func TestDigestCacheBlocks(t *testing.T) {
	dir := t.TempDir()
	const n = 5000
	var ch overlay.Changes
	var seen []seenStat
	stat := func(i int) probe.Stat {
		return probe.Stat{Mode: 0o100644, Ino: uint64(i), Size: uint64(i), MtimeNS: int64(i), CtimeNS: int64(i) + 1}
	}
	sum := func(i, gen int) []byte { s := sha256.Sum256(fmt.Appendf(nil, "%d/%d", i, gen)); return s[:] }
	path := func(i int) attest.Path {
		return attest.Path(fmt.Sprintf("dir%03d/file-with-a-longer-name-%05d", i%100, i))
	}
	for i := range n {
		ch.Entries = append(ch.Entries, attest.Entry{Path: path(i), Change: attest.Added, New: &attest.State{Type: attest.File, SHA256: sum(i, 0)}})
		seen = append(seen, seenStat{path(i), stat(i)})
	}
	slices.SortFunc(ch.Entries, func(a, b attest.Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	dc := newDigestCache(dir, seen, &ch, nil)
	defer dc.close()
	if len(dc.blocks) < 10 {
		t.Fatalf("%d blocks, want many", len(dc.blocks))
	}
	for i := n - 1; i >= 0; i-- { // out of order: blocks are read again
		if got := dc.lookup(path(i), overlay.FileStat(stat(i))); string(got) != string(sum(i, 0)) {
			t.Fatalf("lookup of %q: %x", path(i), got)
		}
		if got := dc.lookup(path(i), overlay.FileStat(stat(i+1))); got != nil {
			t.Fatalf("lookup of %q with another stat answered", path(i))
		}
	}
	if dc.lookup("dir000/missing", overlay.FileStat{}) != nil || dc.lookup("", overlay.FileStat{}) != nil {
		t.Fatal("lookup of a missing path answered")
	}
	// The next walk saw every third file; every fifth has another digest.
	seen = seen[:0]
	for i := range ch.Entries {
		e := &ch.Entries[i]
		var k int
		fmt.Sscanf(string(e.Path[len(e.Path)-5:]), "%d", &k)
		if k%3 == 0 {
			seen = append(seen, seenStat{e.Path, stat(k + 7)})
		} else if k%5 == 0 {
			e.New = &attest.State{Type: attest.File, SHA256: sum(k, 1)}
		}
	}
	next := newDigestCache(dir, seen, &ch, dc)
	defer next.close()
	for i := range n {
		got := next.lookup(path(i), overlay.FileStat(stat(i)))
		switch {
		case i%3 == 0:
			if got := next.lookup(path(i), overlay.FileStat(stat(i+7))); string(got) != string(sum(i, 0)) {
				t.Fatalf("seen %q: %x", path(i), got)
			}
		case i%5 == 0:
			if got != nil {
				t.Fatalf("%q with another digest kept its old one", path(i))
			}
		default:
			if string(got) != string(sum(i, 0)) {
				t.Fatalf("%q not taken over: %x", path(i), got)
			}
		}
	}
	// A cache whose file is gone from under it (closed) answers nothing.
	dc.close()
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Errorf("%d files in the state dir, want the new cache's only", len(names))
	}
}
