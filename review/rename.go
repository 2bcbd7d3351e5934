package review

import (
	"bytes"

	"github.com/layerseal/layerseal/attest"
)

// Rename is a deleted regular file and an added one with the same bytes:
// a view of two entries, never an entry of a change list.
type Rename struct {
	From, To attest.Path
}

// Renames pairs each added regular file (in path order) with the first
// deleted regular file, in path order and not paired yet, of the same
// size and SHA-256. oldDigest gives a deleted file's digest (nil when not
// known); it is asked only of deletions whose size some addition has.
// Directories stay deletions and additions.
func Renames(entries []attest.Entry, oldDigest func(attest.Entry) []byte) []Rename {
	sizes := make(map[uint64]bool)
	for _, e := range entries {
		if e.Change == attest.Added && e.New.Type == attest.File && e.New.SHA256 != nil {
			sizes[e.New.Size] = true
		}
	}
	type deletion struct {
		path   attest.Path
		digest []byte
		used   bool
	}
	var dels []*deletion
	bySize := make(map[uint64][]*deletion)
	for _, e := range entries {
		if e.Change != attest.Deleted || e.Old.Type != attest.File || !sizes[e.Old.Size] {
			continue
		}
		if d := oldDigest(e); d != nil {
			x := &deletion{path: e.Path, digest: d}
			dels = append(dels, x)
			bySize[e.Old.Size] = append(bySize[e.Old.Size], x)
		}
	}
	var out []Rename
	if len(dels) == 0 {
		return nil
	}
	for _, e := range entries {
		if e.Change != attest.Added || e.New.Type != attest.File || e.New.SHA256 == nil {
			continue
		}
		for _, d := range bySize[e.New.Size] {
			if !d.used && bytes.Equal(d.digest, e.New.SHA256) {
				d.used = true
				out = append(out, Rename{From: d.path, To: e.Path})
				break
			}
		}
	}
	return out
}
