package review

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/layerseal/layerseal/attest"
)

// Git's modes of what a patch holds.
const (
	ModeFile    uint32 = 0o100644
	ModeExec    uint32 = 0o100755
	ModeSymlink uint32 = 0o120000
)

// GitMode is git's mode of a file of type t with permission bits perm
// (executable when the owner may execute it), or 0 for what git holds no
// content of: directories, devices, FIFOs and sockets.
func GitMode(t attest.Type, perm uint32) uint32 {
	switch t {
	case attest.File:
		if perm&0o100 != 0 {
			return ModeExec
		}
		return ModeFile
	case attest.Symlink:
		return ModeSymlink
	}
	return 0
}

// binaryProbe is how much of a file git looks at for a NUL byte to call
// it binary.
const binaryProbe = 8000

// Side is one side of a change as a patch holds it.
type Side struct {
	// Mode is git's mode (GitMode); 0 when git holds nothing here (the
	// path is absent, or holds a directory, a device, a FIFO or a socket).
	Mode uint32
	Size uint64
	// Data holds the file's bytes, or a symlink's target.
	Data []byte
	// Unread: the bytes were not read (over the caller's size limit, or
	// not hashed by the statement); the side is shown as binary, by Size
	// and SHA256.
	Unread bool
	// SHA256 is the digest of the bytes when known (nil: computed from
	// Data when needed).
	SHA256 []byte
}

func (s *Side) exists() bool { return s.Mode != 0 }

func (s *Side) sha256() []byte {
	if s.SHA256 == nil && !s.Unread {
		d := sha256.Sum256(s.Data)
		s.SHA256 = d[:]
	}
	return s.SHA256
}

// blobID is git's object id of the side's bytes (SHA-1 of "blob SIZE\0"
// and the bytes), or "" when the bytes were not read.
func (s *Side) blobID() string {
	if s.Unread {
		return ""
	}
	h := sha1.New()
	h.Write([]byte("blob " + strconv.Itoa(len(s.Data)) + "\x00"))
	h.Write(s.Data)
	return hex.EncodeToString(h.Sum(nil))
}

const nullID = "0000000000000000000000000000000000000000"

// FilePair is one path's change as a patch holds it.
type FilePair struct {
	Path attest.Path
	// From is the old path of a rename (Renames finds them); "" for any
	// other change.
	From     attest.Path
	Old, New Side
	// Meta is what changed in the path's metadata (PatchMetadata), or
	// nil: the patch notes it in a comment line before the path's blocks.
	Meta *Meta
}

// Diff is one FilePair compared: the blocks of a git patch that turn the
// old side into the new one (one, or two when a regular file and a
// symlink trade places: a deletion, then an addition), with line counts.
type Diff struct {
	FilePair
	// Binary: a side holds a NUL byte in its first 8000 bytes, as git
	// decides, or was not read.
	Binary bool
	// Added and Deleted count lines (0 for binary files).
	Added, Deleted int
	parts          []part
}

// part is one "diff --git" block.
type part struct {
	from, to attest.Path
	old, new *Side
	same     bool // same bytes on both sides
	hunks    []*udiff.Hunk
}

// Empty reports whether the patch holds nothing for the pair: both sides
// absent for git, or the same bytes under the same mode at the same path,
// and no metadata note.
func (d *Diff) Empty() bool { return len(d.parts) == 0 && d.Meta == nil }

// InGit reports whether git's diff shows the pair (the patch holds a
// "diff --git" block for it): the diffstat lists only such pairs.
func (d *Diff) InGit() bool { return len(d.parts) > 0 }

// Compare compares the two sides of p with a line diff (three lines of
// context). It costs the diff of the two texts; binary files are not
// diffed.
func Compare(p FilePair) (*Diff, error) {
	d := &Diff{FilePair: p}
	from := p.Path
	if p.From != "" {
		from = p.From
	}
	none := &Side{}
	switch {
	case !p.Old.exists() && !p.New.exists():
		return d, nil
	case p.Old.exists() && p.New.exists() && (p.Old.Mode == ModeSymlink) != (p.New.Mode == ModeSymlink):
		// git shows a type change as a deletion and an addition.
		if err := d.add(p.Path, p.Path, &d.Old, none); err != nil {
			return nil, err
		}
		return d, d.add(p.Path, p.Path, none, &d.New)
	}
	return d, d.add(from, p.Path, &d.Old, &d.New)
}

func (d *Diff) add(from, to attest.Path, old, new *Side) error {
	pt := part{from: from, to: to, old: old, new: new}
	switch {
	case old.exists() && new.exists() && !old.Unread && !new.Unread:
		pt.same = bytes.Equal(old.Data, new.Data)
	case old.exists() && new.exists():
		pt.same = old.Size == new.Size && old.sha256() != nil && bytes.Equal(old.sha256(), new.sha256())
	}
	if pt.same && old.Mode == new.Mode && from == to {
		return nil
	}
	if !pt.same {
		if old.Unread || new.Unread || isBinary(old) || isBinary(new) {
			d.Binary = true
		} else {
			a, b := string(old.Data), string(new.Data)
			u, err := udiff.ToUnifiedDiff("", "", a, udiff.Lines(a, b), 3)
			if err != nil {
				return fmt.Errorf("diff of %q: %w", string(to), err)
			}
			pt.hunks = u.Hunks
			for _, h := range u.Hunks {
				for _, l := range h.Lines {
					switch l.Kind {
					case udiff.Insert:
						d.Added++
					case udiff.Delete:
						d.Deleted++
					}
				}
			}
		}
	}
	d.parts = append(d.parts, pt)
	return nil
}

func isBinary(s *Side) bool {
	return s.Mode != ModeSymlink && bytes.IndexByte(s.Data[:min(len(s.Data), binaryProbe)], 0) >= 0
}

// WritePatch writes d in git's extended unified format: for each block
// "diff --git a/PATH b/PATH", then the mode lines ("new file mode",
// "deleted file mode", "old mode"/"new mode"), a rename's "similarity
// index 100%", "rename from" and "rename to", an "index OLD..NEW" line of
// git object ids (in full, when both sides were read), and either the
// hunks under "--- a/PATH" and "+++ b/PATH" ("/dev/null" for an absent
// side) or, for a binary file,
//
//	Binary files a/PATH (SIZE bytes, sha256:HEX) and b/PATH (SIZE bytes, sha256:HEX) differ
//
// with "/dev/null" and no size for an absent side: `git apply` takes that
// line as git's own "Binary files ... differ" (and cannot apply it, as it
// cannot apply git's without the bytes).
//
// A pair with a metadata note (FilePair.Meta) gets, before its blocks,
// one comment line
//
//	# metadata of PATH: META
//
// with PATH quoted as in the blocks and META the note's String: `git
// apply` skips it as it skips any text between patches.
func (d *Diff) WritePatch(w io.Writer) error {
	return d.WritePatchColor(w, nil)
}

// Colors are the terminal escapes a coloured patch wraps its lines in,
// as git colours them by default.
type Colors struct {
	Meta, Frag, Old, New, Reset string
	// Escape, when set, is applied to the lines of file content (and the
	// text after a hunk's range), which hold whatever bytes the files do:
	// a terminal gets them escaped.
	Escape func(string) string
}

// GitColors are git's default colours: headers bold, hunk ranges cyan,
// removed lines red, added lines green.
var GitColors = &Colors{Meta: "\x1b[1m", Frag: "\x1b[36m", Old: "\x1b[31m", New: "\x1b[32m", Reset: "\x1b[m"}

// WritePatchColor is WritePatch with each line wrapped in c's colours
// (none when c is nil).
func (d *Diff) WritePatchColor(w io.Writer, c *Colors) error {
	if c == nil {
		c = &Colors{}
	}
	var b strings.Builder
	d.writeMeta(&b, c)
	for i := range d.parts {
		d.parts[i].write(&b, d.Binary, c)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (p *part) write(b *strings.Builder, binary bool, c *Colors) {
	a, bb := quoteTwo("a/", string(p.from)), quoteTwo("b/", string(p.to))
	meta := len(b.String())
	defer func() {
		if c.Meta != "" {
			// Colour the header lines written so far (up to the hunks).
			s := b.String()
			end := strings.Index(s[meta:], "\n"+c.Frag+"@@ ")
			if end < 0 {
				end = len(s) - meta - 1
			}
			head := s[meta : meta+end+1]
			rest := s[meta+end+1:]
			var nb strings.Builder
			nb.WriteString(s[:meta])
			for _, l := range strings.SplitAfter(strings.TrimSuffix(head, "\n"), "\n") {
				nb.WriteString(c.Meta + strings.TrimSuffix(l, "\n") + c.Reset + "\n")
			}
			nb.WriteString(rest)
			b.Reset()
			b.WriteString(nb.String())
		}
	}()
	fmt.Fprintf(b, "diff --git %s %s\n", a, bb)
	switch {
	case !p.old.exists():
		fmt.Fprintf(b, "new file mode %06o\n", p.new.Mode)
	case !p.new.exists():
		fmt.Fprintf(b, "deleted file mode %06o\n", p.old.Mode)
	case p.old.Mode != p.new.Mode:
		fmt.Fprintf(b, "old mode %06o\nnew mode %06o\n", p.old.Mode, p.new.Mode)
	}
	if p.from != p.to {
		fmt.Fprintf(b, "similarity index 100%%\nrename from %s\nrename to %s\n", Quote(string(p.from)), Quote(string(p.to)))
	}
	if p.same {
		return
	}
	oldID, newID := nullID, nullID
	if p.old.exists() {
		oldID = p.old.blobID()
	}
	if p.new.exists() {
		newID = p.new.blobID()
	}
	if oldID != "" && newID != "" {
		fmt.Fprintf(b, "index %s..%s", oldID, newID)
		if p.old.Mode == p.new.Mode {
			fmt.Fprintf(b, " %06o", p.old.Mode)
		}
		b.WriteByte('\n')
	}
	oldName, newName := "/dev/null", "/dev/null"
	if p.old.exists() {
		oldName = a
	}
	if p.new.exists() {
		newName = bb
	}
	if binary {
		fmt.Fprintf(b, "Binary files %s and %s differ\n", binaryName(oldName, p.old), binaryName(newName, p.new))
		return
	}
	if len(p.hunks) == 0 {
		return // an empty file made or removed: git writes no hunk
	}
	fmt.Fprintf(b, "--- %s%s\n+++ %s%s\n", oldName, tab(p.from, oldName), newName, tab(p.to, newName))
	escape := func(s string) string { return s }
	if c.Escape != nil {
		escape = c.Escape
	}
	var oldLines []string
	if len(p.hunks) > 0 && p.old.exists() {
		oldLines = strings.SplitAfter(string(p.old.Data), "\n")
	}
	for _, h := range p.hunks {
		oldCount, newCount := 0, 0
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Delete:
				oldCount++
			case udiff.Insert:
				newCount++
			default:
				oldCount++
				newCount++
			}
		}
		fmt.Fprintf(b, "%s@@ -%s +%s @@%s%s\n", c.Frag, hunkRange(h.FromLine, oldCount), hunkRange(h.ToLine, newCount), c.Reset, escape(funcName(oldLines, h.FromLine-1)))
		for _, l := range h.Lines {
			color := ""
			switch l.Kind {
			case udiff.Delete:
				color = c.Old
				b.WriteString(color + "-")
			case udiff.Insert:
				color = c.New
				b.WriteString(color + "+")
			default:
				b.WriteByte(' ')
			}
			content, nl := strings.CutSuffix(l.Content, "\n")
			b.WriteString(escape(content))
			if color != "" {
				b.WriteString(c.Reset)
			}
			b.WriteByte('\n')
			if !nl {
				b.WriteString("\\ No newline at end of file\n")
			}
		}
	}
}

// funcName is what git writes after a hunk's range by default: " " and
// the nearest old line above the hunk's first (line index start) that
// begins with a letter, '_' or '$', cut to 80 bytes with trailing space
// removed; "" when there is none.
func funcName(lines []string, start int) string {
	for i := min(start, len(lines)) - 1; i >= 0; i-- {
		l := lines[i]
		if l == "" || !(l[0] >= 'a' && l[0] <= 'z' || l[0] >= 'A' && l[0] <= 'Z' || l[0] == '_' || l[0] == '$') {
			continue
		}
		l = strings.TrimRight(l[:min(len(l), 80)], " \t\n\v\f\r")
		return " " + l
	}
	return ""
}

// tab is git's tab after a file name holding a space in the "---" and
// "+++" lines, which tells the name from what may follow it.
func tab(p attest.Path, name string) string {
	if name != "/dev/null" && strings.IndexByte(string(p), ' ') >= 0 {
		return "\t"
	}
	return ""
}

func binaryName(name string, s *Side) string {
	if !s.exists() {
		return name
	}
	if s.sha256() == nil {
		return fmt.Sprintf("%s (%d bytes, not hashed)", name, s.Size)
	}
	return fmt.Sprintf("%s (%d bytes, sha256:%x)", name, s.Size, s.sha256())
}

// hunkRange is a hunk header's range: "START" for one line, "START,N"
// otherwise, and the line before for an empty range.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return strconv.Itoa(start-1) + ",0"
	case 1:
		return strconv.Itoa(start)
	}
	return strconv.Itoa(start) + "," + strconv.Itoa(n)
}
