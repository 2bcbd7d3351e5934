package review

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// FileStat is one line of a diffstat: what Diff.Stat keeps of a Diff.
type FileStat struct {
	Path, From       attest.Path
	Added, Deleted   int
	Binary           bool
	OldSize, NewSize uint64 // of a binary file's sides (0 for an absent side)
}

// Stat is d's line of a diffstat.
func (d *Diff) Stat() FileStat {
	return FileStat{Path: d.Path, From: d.From, Added: d.Added, Deleted: d.Deleted, Binary: d.Binary, OldSize: d.Old.Size, NewSize: d.New.Size}
}

// name is the stat's name of s: the path quoted as in a patch, and a
// rename as "dir/{old => new}" (git's spelling) when the two share a
// leading directory, "old => new" otherwise.
func (s FileStat) name() string {
	to := Quote(string(s.Path))
	if s.From == "" {
		return to
	}
	from := Quote(string(s.From))
	i := 0
	for j := 0; j < min(len(from), len(to)); j++ {
		if from[j] != to[j] {
			break
		}
		if from[j] == '/' {
			i = j + 1
		}
	}
	if i == 0 {
		return from + " => " + to
	}
	return from[:i] + "{" + from[i:] + " => " + to[i:] + "}"
}

// WriteStat writes git's diffstat of stats within width columns (git's
// default is 80): " NAME | COUNT +++---" per file, the bar scaled to the
// largest change when it does not fit, " NAME | Bin OLD -> NEW bytes" for
// a binary file, names too long for the column shortened to ".../tail",
// and the summary line " N files changed, I insertions(+), D
// deletions(-)".
func WriteStat(w io.Writer, stats []FileStat, width int) error {
	if len(stats) == 0 {
		return nil // git prints nothing for no change
	}
	names := make([]string, len(stats))
	nameWidth, maxChange, numberWidth := 0, 0, 0
	ins, del := 0, 0
	for i, s := range stats {
		names[i] = s.name()
		nameWidth = max(nameWidth, len(names[i]))
		if s.Binary {
			numberWidth = max(numberWidth, 3) // "Bin"
			continue
		}
		maxChange = max(maxChange, s.Added+s.Deleted)
		ins, del = ins+s.Added, del+s.Deleted
	}
	numberWidth = max(numberWidth, len(strconv.Itoa(maxChange)))
	// git: " " name " | " number " " graph, one column kept free.
	graphWidth := min(maxChange, 40)
	if nameWidth+numberWidth+6+graphWidth > width {
		if nameWidth > width*5/8 {
			nameWidth = max(width*5/8, 8)
		}
		graphWidth = max(min(graphWidth, width-nameWidth-numberWidth-6), 6)
	}
	var b strings.Builder
	for i, s := range stats {
		name := names[i]
		if len(name) > nameWidth {
			name = "..." + name[len(name)-(nameWidth-3):]
			if k := strings.IndexByte(name[3:], '/'); k >= 0 {
				name = ".../" + name[3+k+1:]
			}
		}
		if s.Binary {
			fmt.Fprintf(&b, " %-*s | %*s %d -> %d bytes\n", nameWidth, name, numberWidth, "Bin", s.OldSize, s.NewSize)
			continue
		}
		add, dele := s.Added, s.Deleted
		if maxChange > graphWidth {
			add, dele = scale(add, graphWidth, maxChange), scale(dele, graphWidth, maxChange)
		}
		fmt.Fprintf(&b, " %-*s | %*d", nameWidth, name, numberWidth, s.Added+s.Deleted)
		if s.Added+s.Deleted > 0 {
			fmt.Fprintf(&b, " %s%s", strings.Repeat("+", add), strings.Repeat("-", dele))
		}
		b.WriteByte('\n')
	}
	b.WriteString(StatSummary(len(stats), ins, del))
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// scale is git's scale_linear: n of max in width columns, at least one
// column for a non-zero n.
func scale(n, width, max int) int {
	if n == 0 {
		return 0
	}
	return 1 + n*(width-1)/max
}

// StatSummary is the last line of a diffstat, as git words it.
func StatSummary(files, ins, del int) string {
	s := fmt.Sprintf(" %d %s changed", files, plural(files, "file", "files"))
	if ins != 0 || del == 0 {
		s += fmt.Sprintf(", %d %s", ins, plural(ins, "insertion(+)", "insertions(+)"))
	}
	if del != 0 || ins == 0 {
		s += fmt.Sprintf(", %d %s", del, plural(del, "deletion(-)", "deletions(-)"))
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
