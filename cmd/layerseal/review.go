package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/review"
)

// reviewFlags are diff's views of a staged change set.
func reviewFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "patch", Aliases: []string{"p"}, Usage: "print the change set as a git patch against the workspace, which git apply takes"},
		&cli.BoolFlag{Name: "stat", Usage: "print git's diffstat of the change set"},
		&cli.BoolFlag{Name: "summary", Usage: "print the change set's counts per directory"},
		allFlag(),
		colorFlag(),
	}
}

// colorFlag is --color for show, diff and sessions.
func colorFlag() cli.Flag {
	return &cli.StringFlag{Name: "color", Value: "auto", Usage: "colour the output: `WHEN` is auto (on a terminal, unless NO_COLOR is set), always or never",
		Validator: func(v string) error {
			if v != "auto" && v != "always" && v != "never" {
				return fmt.Errorf("--color %q: want auto, always or never", v)
			}
			return nil
		}}
}

// useColor decides --color: always, never, or auto: on a terminal whose
// TERM is not "dumb", unless NO_COLOR is set (https://no-color.org).
func useColor(cmd *cli.Command) bool {
	switch cmd.String("color") {
	case "always":
		return true
	case "never":
		return false
	}
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(os.Stdout)
}

// changeColor is the colour of a change's code in a listing, as git
// status colours them: additions green, deletions red, the rest yellow.
func changeColor(c attest.Change) string {
	switch c {
	case attest.Added:
		return "\x1b[32m"
	case attest.Deleted:
		return "\x1b[31m"
	}
	return "\x1b[33m"
}

// allFlag is show's and diff's --all.
func allFlag() cli.Flag {
	return &cli.BoolFlag{Name: "all", Usage: "list every change: no directory added or deleted whole folded into one line"}
}

// wantsReview reports whether diff was asked for one of the views that
// read the session's files.
func wantsReview(cmd *cli.Command) bool {
	return cmd.Bool("patch") || cmd.Bool("stat")
}

// diffReview prints the views diff --patch and --stat ask for, of the
// staged session OUT, limited to the PATHs given after it.
func diffReview(cmd *cli.Command) error {
	if err := needRoot("diff"); err != nil {
		return err
	}
	paths, err := parsePaths("diff", cmd.Args().Slice()[1:])
	if err != nil {
		return err
	}
	out := cmd.Args().First()
	r, err := storeOf(cmd).OpenReview(out)
	if err != nil {
		return exitWith(exitFailed, stagedErr(cmd, err, out))
	}
	defer r.Close()
	entries, err := r.Entries(paths)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	if len(paths) == 0 {
		// git neither shows nor applies paths inside .git: they are left
		// out unless named.
		n := len(entries)
		entries = slices.DeleteFunc(slices.Clone(entries), func(e attest.Entry) bool { return attest.Within(e.Path, ".git") })
		if n -= len(entries); n > 0 {
			fmt.Fprintf(os.Stderr, "layerseal: %d change(s) inside .git are not in the %s (git applies none there): `layerseal diff %s` lists them, `layerseal diff --patch %s .git` shows them\n", n, view(cmd), sessionArgs(cmd, out), sessionArgs(cmd, out))
		}
	}
	for _, p := range r.Conflicts(entries) {
		fmt.Fprintf(os.Stderr, "layerseal: %s changed in the workspace since the session started: shown against the workspace as it is now\n", p)
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	defer w.Flush()
	colors := &review.Colors{}
	if useColor(cmd) {
		c := *review.GitColors
		colors = &c
	}
	if isTerminal(os.Stdout) {
		// The agent chose these bytes: a terminal gets them escaped.
		colors.Escape = printable
	}
	// A rename is shown as one when the workspace still holds the bytes
	// at its old path.
	renamed := make(map[attest.Path]review.FilePair)
	gone := make(map[attest.Path]bool)
	byPath := make(map[attest.Path]attest.Entry, len(entries))
	for _, e := range entries {
		byPath[e.Path] = e
	}
	for _, rn := range review.Renames(entries, r.OldDigest) {
		pair, err := r.PairFrom(rn.From, byPath[rn.To])
		if err != nil {
			return exitWith(exitFailed, err)
		}
		if pair.Old.Mode == review.ModeFile || pair.Old.Mode == review.ModeExec {
			if !pair.Old.Unread && !pair.New.Unread && bytes.Equal(pair.Old.Data, pair.New.Data) {
				renamed[rn.To], gone[rn.From] = pair, true
			}
		}
	}
	var stats []review.FileStat
	for _, e := range entries {
		if gone[e.Path] {
			continue
		}
		if skipped := notInPatch(e); skipped != "" {
			fmt.Fprintf(os.Stderr, "layerseal: %s is %s: a git patch holds only files and symlinks\n", e.Path, skipped)
			continue
		}
		pair, ok := renamed[e.Path]
		if !ok {
			if pair, err = r.Pair(e); err != nil {
				return exitWith(exitFailed, err)
			}
		}
		d, err := review.Compare(pair)
		if err != nil {
			return exitWith(exitFailed, err)
		}
		if d.Empty() {
			continue
		}
		if cmd.Bool("patch") {
			if err := d.WritePatchColor(w, colors); err != nil {
				return exitWith(exitFailed, err)
			}
		}
		if cmd.Bool("stat") && d.InGit() {
			stats = append(stats, d.Stat())
		}
	}
	if cmd.Bool("stat") {
		if cmd.Bool("patch") {
			fmt.Fprintln(w)
		}
		review.WriteStat(w, stats, 80)
	}
	for _, x := range r.Statement().Excluded {
		fmt.Fprintf(os.Stderr, "layerseal: excluded subtree %s (%s, %d bytes) is counted, not itemized: not in the patch\n", x.Path, plural(x.Entries, "entry", "entries"), x.Bytes)
	}
	notes, err := r.AttributeNotes()
	if err != nil {
		return exitWith(exitFailed, err)
	}
	writeAttributeNotes(os.Stderr, "layerseal: ", notes)
	return nil
}

// view names the view diff prints, for messages.
func view(cmd *cli.Command) string {
	if cmd.Bool("patch") {
		return "patch"
	}
	return "diffstat"
}

// notInPatch says what e's new state is when a git patch cannot hold it
// (a device, a FIFO, a socket), or "".
func notInPatch(e attest.Entry) string {
	if e.New == nil {
		return ""
	}
	switch e.New.Type {
	case attest.CharDev, attest.BlockDev:
		return "a device"
	case attest.FIFO:
		return "a FIFO"
	case attest.Socket:
		return "a socket"
	}
	return ""
}

// stagedErr adds to an error of a closed session where its statement is
// and, for an applied one, where its changes can still be seen: the files
// hold the agent's content now and layerseal kept no copy of the old, but
// git has it when the workspace is a repository.
func stagedErr(cmd *cli.Command, err error, ref string) error {
	if !errorsIsClosed(err) {
		return err
	}
	info, _ := storeOf(cmd).Session(ref)
	out := ref
	if info != nil {
		out = info.Out
	}
	msg := fmt.Sprintf("no staged change set (`layerseal show %s` lists the changes)", filepath.Join(out, layerseal.StatementFile))
	if errors.Is(err, layerseal.ErrAlreadyApplied) {
		msg += "; the workspace holds them now and layerseal keeps no copy of what the files held before"
		if info != nil && info.LaunchCommit != "" {
			msg += fmt.Sprintf(": in the workspace, `git diff %s` shows the edits to tracked files against the commit HEAD was at when the session launched, and `git status` the new files", info.LaunchCommit)
		}
	}
	return fmt.Errorf("%w: %s", err, msg)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// writeChanges prints one line per change, as `git status --short` does:
// code, two spaces, path in its text form. A rename (a deleted file and
// an added one with the same bytes) is one line "R  OLD -> NEW"; a
// directory added or deleted with everything beneath it is one line
// "A  DIR/  (N entries beneath; --all lists them)" unless all.
func writeChanges(w io.Writer, entries []attest.Entry, all, color bool, oldDigest func(attest.Entry) []byte) {
	code := func(c attest.Change) string {
		if color {
			return changeColor(c) + shortCode[c] + "\x1b[m"
		}
		return shortCode[c]
	}
	renames := review.Renames(entries, oldDigest)
	from := make(map[attest.Path]attest.Path, len(renames))
	gone := make(map[attest.Path]bool, len(renames))
	for _, r := range renames {
		from[r.To], gone[r.From] = r.From, true
	}
	var lines []review.Line
	if all {
		lines = make([]review.Line, len(entries))
		for i, e := range entries {
			lines[i] = review.Line{Entry: e}
		}
	} else {
		lines = review.Fold(entries)
	}
	for _, l := range lines {
		e := l.Entry
		switch {
		case gone[e.Path]:
		case from[e.Path] != "":
			r := "R"
			if color {
				r = "\x1b[33mR\x1b[m"
			}
			fmt.Fprintf(w, "%s  %s -> %s\n", r, from[e.Path], e.Path)
		case l.Folded > 0:
			fmt.Fprintf(w, "%s  %s/  (%s beneath; --all lists them)\n", code(e.Change), e.Path, plural(l.Folded, "entry", "entries"))
		default:
			fmt.Fprintf(w, "%s  %s%s\n", code(e.Change), e.Path, metaSuffix(e))
		}
	}
}

// statementDigest is a deleted file's digest as the statement holds it
// (when the reader hashed it), for views that read no workspace.
func statementDigest(e attest.Entry) []byte {
	if e.Old == nil {
		return nil
	}
	return e.Old.SHA256
}

// writeSummary prints diff --summary: the change set's counts per
// directory, a directory added or deleted whole counted as a group of
// its own.
func writeSummary(w io.Writer, entries []attest.Entry) error {
	return review.WriteSummary(w, review.Summarize(review.Fold(entries)))
}

// applyGitBranch is apply --git-branch NAME.
func applyGitBranch(cmd *cli.Command, name string) error {
	if err := needRoot("apply"); err != nil {
		return err
	}
	out := cmd.Args().First()
	res, err := storeOf(cmd).ApplyToGitBranch(out, name)
	if err != nil {
		return exitWith(exitFailed, stagedErr(cmd, err, out))
	}
	inGit := 0
	for _, l := range res.Left {
		if attest.Within(l.Path, ".git") {
			inGit++
			continue
		}
		fmt.Fprintf(os.Stderr, "layerseal: not in the commit: %s (%s)\n", l.Path, l.Why)
	}
	if inGit > 0 {
		fmt.Fprintf(os.Stderr, "layerseal: not in the commit: %d change(s) inside .git (never committed)\n", inGit)
	}
	if res.AgentCommits > 0 {
		fmt.Fprintf(os.Stderr, "layerseal: the branch %s holds the agent's %d commit(s) as it made them, then commit %s of what it left uncommitted (%d change(s))\n", name, res.AgentCommits, res.Commit, res.Committed)
	} else {
		fmt.Fprintf(os.Stderr, "layerseal: committed %d change(s) to the new branch %s: commit %s, parent %s (HEAD at launch)\n", res.Committed, name, res.Commit, res.Parent)
	}
	fmt.Fprintf(os.Stderr, "layerseal: the working tree, index and checked-out branch are as they were: `git switch %[1]s` or `git merge %[1]s` takes the branch; the change set stays staged: `layerseal discard %[2]s` drops it (`layerseal apply %[2]s` applies it to the working tree instead)\n", name, sessionArgs(cmd, out))
	fmt.Println(res.Commit)
	return nil
}

// onBranch is what apply and discard add for a session that was written
// to a git branch before: the branch holds the change set still.
func onBranch(info *layerseal.SessionInfo) string {
	if info == nil || info.GitCommit == "" {
		return ""
	}
	return fmt.Sprintf(" (it was written to git branch %s, commit %s, before: the branch is left as it is)", strings.TrimPrefix(info.GitBranch, "refs/heads/"), info.GitCommit)
}
