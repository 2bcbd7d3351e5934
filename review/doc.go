// Package review turns a change list into the views a person reads before
// applying it: a patch in git's extended unified format, git's diffstat, a
// summary per directory, folding of whole added or deleted directories,
// and renames (a deletion and an addition of the same bytes).
//
// # Where to start
//
// Build a FilePair for each change (the two sides as git holds them: a
// regular file or a symlink, or nothing), call Compare, and write the
// result with Diff.WritePatch, or collect the Diffs and call WriteStat.
// Renames pairs deletions with additions before that; Fold and Summarize
// work on the change list alone. Metadata says what a change did to a
// path's mode, owner, ACLs and xattrs, for every view: its String for a
// listing, its fields for JSON, and a comment line in a patch
// (FilePair.Meta).
//
// # What is promised
//
// The views are derived from a list and never change it: a rename or a
// folded directory exists only in what these functions print. A patch
// names paths as git does (C-style quoting of control bytes, '"', '\\' and
// bytes from 0x7f up), so `git apply` reads back any path, newlines and
// invalid UTF-8 included. The line diff is go-udiff's (the Go team's
// diff, from gopls), with three lines of context.
package review
