package layerseal

import (
	"fmt"
	"path"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/review"
)

// AttributeNote is a line of a .gitattributes file in the change set
// that hides the change of the files it matches from git diff or a
// review (review.HidingAttributes).
type AttributeNote struct {
	Path   attest.Path  `json:"path"`   // the .gitattributes file
	Line   attest.Bytes `json:"line"`   // the line, trimmed; "" for a note on the whole file
	Effect string       `json:"effect"` // what it hides
}

// String is the note as a line of text: the file, the line quoted and
// what it does.
func (n AttributeNote) String() string {
	if n.Line == "" {
		return fmt.Sprintf("%s: %s", n.Path, n.Effect)
	}
	return fmt.Sprintf("%s: %q %s", n.Path, n.Line.String(), n.Effect)
}

// AttributeNotes returns the notes of every .gitattributes file, at any
// depth, that the change set adds or changes: each line of its new
// contents that is not in the workspace's and hides changes from git diff
// (review.HidingAttributes). The new contents are read from the upper
// layer and checked against the statement as Pair reads them; a file over
// ReviewReadLimit or without a digest gets one note saying it was not
// read.
func (r *Review) AttributeNotes() ([]AttributeNote, error) {
	var out []AttributeNote
	for _, e := range r.entries {
		if path.Base(string(e.Path)) != review.AttributesFile || e.New == nil || e.New.Type != attest.File {
			continue
		}
		p, err := r.Pair(e)
		if err != nil {
			return nil, err
		}
		if p.New.Unread || p.Old.Unread {
			out = append(out, AttributeNote{Path: e.Path, Effect: "too large to read: what it hides from git diff is not known"})
			continue
		}
		for _, n := range review.HidingAttributes(p.Old.Data, p.New.Data) {
			out = append(out, AttributeNote{Path: e.Path, Line: attest.Bytes(n.Line), Effect: n.Effect})
		}
	}
	return out, nil
}

// attributeNotes is Review.AttributeNotes of the session's swept
// statement st, read from its upper layer before anything is applied.
func (s *session) attributeNotes(st *attest.Statement) ([]AttributeNote, error) {
	upper, err := linux.Openat(unix.AT_FDCWD, s.dir.upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("its upper layer: %w", unwrapPath(err))
	}
	defer linux.Close(upper)
	r := &Review{st: st, entries: st.AppliedEntries(), ws: s.wsDir, upper: upper}
	return r.AttributeNotes()
}
