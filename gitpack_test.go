package layerseal

import (
	"bytes"
	"errors"
	"testing"
)

// TestApplyDelta: a delta's copies and inserts make its result; one that
// copies or inserts out of bounds, uses the reserved instruction, does
// not fit its base or its size is refused as a malformed pack.
func TestApplyDelta(t *testing.T) {
	base := []byte("0123456789")
	for _, c := range []struct {
		name  string
		delta []byte
		want  string // "" for a refusal
	}{
		{"copy and insert", []byte{10, 6, 0x91, 2, 3, 3, 'a', 'b', 'c'}, "234abc"},
		{"copy past the base", []byte{10, 6, 0x91, 8, 6}, ""},
		{"insert past the delta", []byte{10, 6, 6, 'a'}, ""},
		{"reserved", []byte{10, 1, 0}, ""},
		{"another base size", []byte{9, 1, 1, 'a'}, ""},
		{"short of its size", []byte{10, 2, 1, 'a'}, ""},
		{"past its size", []byte{10, 1, 2, 'a', 'b'}, ""},
		{"truncated copy", []byte{10, 1, 0x91, 2}, ""},
	} {
		got, err := (&agentRepo{}).applyDelta(base, c.delta)
		switch {
		case c.want == "" && !errors.Is(err, errPack):
			t.Errorf("%s: %q, %v; want a refusal", c.name, got, err)
		case c.want != "" && (err != nil || !bytes.Equal(got, []byte(c.want))):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

// TestTreeLinks: a tree's trees and blobs are followed, gitlinks not; a
// malformed entry or an unknown mode is refused.
func TestTreeLinks(t *testing.T) {
	id := bytes.Repeat([]byte{0xab}, 20)
	entry := func(mode, name string) []byte { return append([]byte(mode+" "+name+"\x00"), id...) }
	tree := bytes.Join([][]byte{entry("40000", "d"), entry("100644", "f"), entry("160000", "sub"), entry("120000", "l")}, nil)
	links, err := treeLinks(tree, 20)
	if err != nil || len(links) != 3 || links[0].typ != "tree" || links[1].typ != "blob" || links[2].typ != "blob" {
		t.Errorf("treeLinks: %v, %v", links, err)
	}
	for _, bad := range [][]byte{entry("100664", "f"), entry("100644", "f")[:10], []byte("100644 \x00"), entry("100644", "")} {
		if _, err := treeLinks(bad, 20); err == nil {
			t.Errorf("treeLinks(%q) took it", bad)
		}
	}
}
