package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/attest"
)

func proveCommand() *cli.Command {
	return &cli.Command{
		Name:        "prove",
		Usage:       "prove what a run did to one path",
		Description: "Write a proof bundle of one path of a run's statement: that it changed (and how) or that it did not (with --subtree: what changed at or under it, or that nothing did), checkable with `verify` and the public key alone, without the rest of the change list.",
		ArgsUsage:   "OUT PATH...",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "applied", Usage: "prove of the change set applied after the protected-path sweep, not of every change observed"},
			&cli.BoolFlag{Name: "subtree", Usage: "prove of each PATH and everything under it: the changes there, each with its proof, or that there are none"},
			&cli.StringFlag{Name: "out", Usage: "write the bundle to `FILE` (one PATH), or one bundle per PATH into the directory FILE, named 1.json, 2.json, … in PATH order (several PATHs); default: standard output (one PATH)"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() < 2 {
				return usageErr("usage: layerseal prove [--applied] [--subtree] [--out FILE] OUT PATH...")
			}
			args := cmd.Args().Slice()
			out, dest := args[0], cmd.String("out")
			if len(args) > 2 && dest == "" {
				return usageErr("prove: %d paths make %d bundles: name a directory for them with --out DIR", len(args)-1, len(args)-1)
			}
			paths, err := parsePaths("prove", args[1:])
			if err != nil {
				return err
			}
			pr, err := attest.OpenProver(out)
			if err != nil {
				return exitWith(exitFailed, fmt.Errorf("prove: %w%s", err, notRunHint(out, err)))
			}
			if len(paths) > 1 {
				if err := os.MkdirAll(dest, 0o755); err != nil {
					return exitWith(exitFailed, fmt.Errorf("prove: %w", err))
				}
			}
			for i, p := range paths {
				b, err := proveWith(pr, cmd.Bool("subtree"))(p, cmd.Bool("applied"))
				if err != nil {
					return exitWith(exitFailed, err)
				}
				file := dest
				if len(paths) > 1 {
					file = filepath.Join(dest, fmt.Sprintf("%d.json", i+1))
				}
				if file == "" {
					os.Stdout.Write(b)
				} else if err := os.WriteFile(file, b, 0o644); err != nil {
					return exitWith(exitFailed, fmt.Errorf("prove: %w", err))
				}
				bd, err := attest.ParseBundle(b)
				if err != nil {
					return exitWith(exitFailed, err)
				}
				where := file
				if where == "" {
					where = "standard output"
				}
				fmt.Fprintf(os.Stderr, "%s: %s, %d bytes, written to %s\n", p, bundleWhat(bd), len(b), where)
				if reasons, excluded := pr.Head().Covers(p); len(reasons) > 0 || excluded != "" {
					fmt.Fprintf(os.Stderr, "%s: note: the statement is incomplete at or around this path, so `verify` exits 2 for it (see `layerseal show %s`)\n", p, filepath.Join(out, attest.StatementFile))
				}
			}
			return nil
		},
	}
}

// notRunHint is what to add to err, an error reading the run in out,
// when a file of the run is missing.
func notRunHint(out string, err error) string {
	if !errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	return fmt.Sprintf("; OUT is the --out directory of a finished run, which holds %s and its signed head %s beside it, and each checkpoint's head beside the checkpoint (a run of an older layerseal wrote no heads)",
		attest.StatementFile, attest.HeadFile(attest.StatementFile))
}

// proveWith is pr's Prove, or ProveSubtree with subtree.
func proveWith(pr *attest.Prover, subtree bool) func(attest.Path, bool) ([]byte, error) {
	if subtree {
		return pr.ProveSubtree
	}
	return pr.Prove
}

// parsePaths parses workspace paths as `show` prints them (a leading
// "./" and a trailing "/" allowed).
func parsePaths(command string, args []string) ([]attest.Path, error) {
	var paths []attest.Path
	for _, a := range args {
		var p attest.Path
		err := p.UnmarshalText([]byte(strings.TrimPrefix(strings.TrimSuffix(a, "/"), "./")))
		if err == nil {
			err = p.Valid()
		}
		if err != nil {
			return nil, usageErr("%s: path %q: %v; give a path inside the workspace, relative to it, as `layerseal show` prints it", command, a, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// bundleWhat says what a bundle shows, as prove reports it.
func bundleWhat(bd *attest.Bundle) string {
	switch bd.Kind {
	case attest.Inclusion:
		return fmt.Sprintf("%s: inclusion bundle", bd.Leaves[0].Entry.Change)
	case attest.Subtree:
		n := 0
		for _, l := range bd.Leaves {
			if attest.Within(l.Entry.Path, bd.Path) || bd.Path == attest.Root {
				n++
			}
		}
		if n == 0 {
			return "nothing at or under it changed: subtree bundle"
		}
		return fmt.Sprintf("%d change(s) at or under it: subtree bundle", n)
	}
	return "not changed: absence bundle"
}

// verifyBundle is `verify` of a proof bundle.
func verifyBundle(cmd *cli.Command, path string, b []byte, pub attest.PublicKey) error {
	got, err := attest.VerifyBundleWith(b, pub, attest.ProofOptions{SessionID: cmd.String("session")})
	if err != nil && !errors.Is(err, attest.ErrIncomplete) {
		if cmd.Bool("json") {
			printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
		}
		if err == attest.ErrNotVerified {
			err = errors.New("not verified: the bundle does not hold under this key (a signature, an audit path or the leaves' order does not check out)")
		}
		return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
	}
	printProven(cmd, got)
	if !got.Holds() {
		if got.Kind == attest.Inclusion {
			fmt.Fprintf(os.Stderr, "layerseal: the statement is incomplete in a way that covers %s (above): there may be more to it than this change\n", got.Path)
		} else {
			fmt.Fprintf(os.Stderr, "layerseal: the statement is incomplete in a way that covers %s (above), so this does not show that it is untouched\n", got.Path)
		}
		return exitWith(exitIncomplete, nil)
	}
	return nil
}

// printProven prints what a bundle that verified shows.
func printProven(cmd *cli.Command, got *attest.Proven) {
	set := "observed change set"
	size := got.Head.Count
	if got.Applied {
		set, size = "applied change set", got.Head.AppliedCount
	}
	reasons, excluded := got.Covering, got.Excluded
	if cmd.Bool("json") {
		m := map[string]any{"verified": true, "holds": got.Holds(), "kind": got.Kind, "path": got.Path, "applied": got.Applied,
			"session_id": got.Head.SessionID, "key_id": got.Head.KeyID, "size": size, "complete": got.Head.Complete,
			"covering": headReasonsJSON(reasons)}
		if excluded != "" {
			m["excluded"] = excluded
		}
		if got.Entry != nil {
			m["change"] = entryJSONOf(got.Entry)
		}
		var ns []map[string]any
		for i := range got.Neighbours {
			ns = append(ns, entryJSONOf(&got.Neighbours[i]))
		}
		if got.Kind != attest.Inclusion {
			m["neighbours"] = ns
		}
		if got.Kind == attest.Subtree {
			m["changes"] = entriesJSONOf(got.Changed)
		}
		printJSON(m)
	} else {
		switch got.Kind {
		case attest.Inclusion:
			fmt.Printf("verified: %s changed (%s) in session %s, %s of %d change(s)\n", got.Path, got.Entry.Change, got.Head.SessionID, set, size)
			for _, s := range []struct {
				name string
				st   *attest.State
			}{{"before", got.Entry.Old}, {"after", got.Entry.New}} {
				if s.st != nil {
					fmt.Printf("%s: %s\n", s.name, stateText(s.st))
				}
			}
		case attest.Subtree:
			if len(got.Changed) == 0 {
				fmt.Printf("verified: nothing at or under %s is in the %s of session %s (%d change(s); %s)\n", got.Path, set, got.Head.SessionID, size, neighboursText(got))
			} else {
				fmt.Printf("verified: %d change(s) at or under %s, and no other, in the %s of session %s (%d change(s))\n", len(got.Changed), got.Path, set, got.Head.SessionID, size)
				for _, e := range got.Changed {
					fmt.Printf("%s  %s\n", shortCode[e.Change], e.Path)
				}
			}
		default:
			fmt.Printf("verified: %s is not in the %s of session %s (%d change(s); %s)\n", got.Path, set, got.Head.SessionID, size, neighboursText(got))
		}
		for _, r := range reasons {
			at := ""
			if r.Path != "" {
				at = " at " + r.Path.String()
			}
			fmt.Printf("incomplete: %s%s\n", r.Code, at)
		}
		if excluded != "" {
			fmt.Printf("excluded: %s is summarized, not listed, in the statement\n", excluded)
		}
	}
}

// neighboursText names the neighbours a bundle showed.
func neighboursText(got *attest.Proven) string {
	if len(got.Neighbours) == 0 {
		return "the change set is empty"
	}
	var names []string
	for _, n := range got.Neighbours {
		names = append(names, n.Path.String())
	}
	return "its neighbours in path order: " + strings.Join(names, ", ")
}

func entriesJSONOf(es []attest.Entry) []map[string]any {
	out := []map[string]any{}
	for i := range es {
		out = append(out, entryJSONOf(&es[i]))
	}
	return out
}

func headReasonsJSON(rs []attest.Reason) []map[string]any {
	out := []map[string]any{}
	for _, r := range rs {
		m := map[string]any{"code": r.Code}
		if r.Path != "" {
			m["path"] = r.Path
		}
		out = append(out, m)
	}
	return out
}

func entryJSONOf(e *attest.Entry) map[string]any {
	m := map[string]any{"path": e.Path, "change": e.Change}
	if e.Old != nil {
		m["old"] = stateText(e.Old)
	}
	if e.New != nil {
		m["new"] = stateText(e.New)
	}
	return m
}

// stateText is one line of what a state holds.
func stateText(s *attest.State) string {
	t := fmt.Sprintf("%s mode %04o uid %d gid %d", s.Type, s.Mode, s.UID, s.GID)
	switch s.Type {
	case attest.File:
		t += fmt.Sprintf(" size %d", s.Size)
		if s.SHA256 != nil {
			t += fmt.Sprintf(" sha256 %x", s.SHA256)
		}
	case attest.Symlink:
		t += " -> " + s.Target.String()
	}
	return t
}

// verifyHead is `verify` of a signed head (statement.head.json, or
// NNNNNN.head.json beside a checkpoint).
func verifyHead(cmd *cli.Command, path string, env []byte, pub attest.PublicKey) error {
	h, err := attest.VerifyHead(env, pub)
	if err == nil && cmd.String("session") != "" && h.SessionID != cmd.String("session") {
		err = fmt.Errorf("%w: the head is of session %s, not of session %q", attest.ErrNotVerified, h.SessionID, cmd.String("session"))
	}
	if err != nil {
		if cmd.Bool("json") {
			printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
		}
		return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
	}
	of, applied := "the statement", fmt.Sprintf(" (%d applied)", h.AppliedCount)
	if h.Kind == attest.HeadKindCheckpoint {
		of, applied = fmt.Sprintf("checkpoint %d", h.Seq), ""
	}
	if cmd.Bool("json") {
		printJSON(map[string]any{"verified": true, "head_of": h.Kind, "seq": h.Seq, "session_id": h.SessionID, "key_id": h.KeyID,
			"alg": h.Alg, "root": fmt.Sprintf("%x", h.Root), "count": h.Count, "applied_root": fmt.Sprintf("%x", h.AppliedRoot),
			"applied_count": h.AppliedCount, "complete": h.Complete, "incomplete": headReasonsJSON(h.Incomplete)})
	} else {
		fmt.Printf("verified: signed head of %s of session %s, %s, %d change(s)%s, root %x\n",
			of, h.SessionID, completenessOf(h.Complete, len(h.Incomplete)), h.Count, applied, h.Root)
		for _, r := range h.Incomplete {
			at := ""
			if r.Path != "" {
				at = " at " + r.Path.String()
			}
			fmt.Printf("incomplete: %s%s\n", r.Code, at)
		}
	}
	if !h.Complete {
		return exitWith(exitIncomplete, nil)
	}
	return nil
}
