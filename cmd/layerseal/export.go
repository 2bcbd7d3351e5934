package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/attest"
)

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:        "export",
		Usage:       "write a run's whole evidence into one file",
		Description: "Write a run's whole evidence (launch record, statement, its head, the checkpoint chain with their heads, and proofs of the paths asked for) into one file that `verify --key PUB FILE` checks offline.",
		ArgsUsage:   "OUT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "write the evidence file to `FILE`"},
			&cli.StringSliceFlag{Name: "prove", Usage: "also a proof of `PATH`, as prove makes"},
			&cli.BoolFlag{Name: "subtree", Usage: "prove of each --prove PATH and everything under it"},
			&cli.BoolFlag{Name: "applied", Usage: "prove of the change set applied after the protected-path sweep"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 || cmd.String("out") == "" {
				return usageErr("usage: layerseal export --out FILE [--prove PATH]... [--subtree] [--applied] OUT")
			}
			out, dest := cmd.Args().First(), cmd.String("out")
			paths, err := parsePaths("export --prove", cmd.StringSlice("prove"))
			if err != nil {
				return err
			}
			x, err := attest.ReadExport(out)
			if err != nil {
				return exitWith(exitFailed, fmt.Errorf("export: %w%s", err, notRunHint(out, err)))
			}
			if len(paths) > 0 {
				pr, err := attest.OpenProver(out)
				if err != nil {
					return exitWith(exitFailed, fmt.Errorf("export: %w%s", err, notRunHint(out, err)))
				}
				for _, p := range paths {
					b, err := proveWith(pr, cmd.Bool("subtree"))(p, cmd.Bool("applied"))
					if err != nil {
						return exitWith(exitFailed, fmt.Errorf("export: %w", err))
					}
					x.Proofs = append(x.Proofs, b)
				}
			}
			b, err := x.Marshal()
			if err != nil {
				return exitWith(exitFailed, fmt.Errorf("export: %w", err))
			}
			if err := os.WriteFile(dest, b, 0o644); err != nil {
				return exitWith(exitFailed, fmt.Errorf("export: %w", err))
			}
			fmt.Fprintf(os.Stderr, "%s: launch record, statement, head, %d checkpoint(s), %d proof(s), %d bytes, written to %s\n",
				filepath.Clean(out), len(x.Checkpoints), len(x.Proofs), len(b), dest)
			return nil
		},
	}
}

// verifyExport is `verify` of an evidence export.
func verifyExport(cmd *cli.Command, path string, file []byte, pub attest.PublicKey) error {
	ev, err := attest.VerifyExport(file, pub, attest.ProofOptions{SessionID: cmd.String("session")})
	if err != nil && !errors.Is(err, attest.ErrIncomplete) {
		if cmd.Bool("json") {
			printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
		}
		return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
	}
	st := ev.Statement
	if cmd.Bool("json") {
		var proofs []map[string]any
		for _, p := range ev.Proofs {
			m := map[string]any{"holds": p.Holds(), "kind": p.Kind, "path": p.Path, "applied": p.Applied, "covering": headReasonsJSON(p.Covering)}
			if p.Entry != nil {
				m["change"] = entryJSONOf(p.Entry)
			}
			if p.Kind == attest.Subtree {
				m["changes"] = entriesJSONOf(p.Changed)
			}
			proofs = append(proofs, m)
		}
		printJSON(map[string]any{"verified": true, "export": true, "holds": ev.Complete(), "session_id": st.SessionID, "key_id": st.KeyID,
			"complete": st.Complete, "count": st.Count, "applied_count": st.AppliedCount, "checkpoints": len(ev.Chain),
			"incomplete": reasonsJSON(st.Incomplete), "proofs": proofs})
	} else {
		fmt.Printf("verified: export of session %s: launch record, statement (%s, %d change(s), %d applied), its head, %d checkpoint(s) with their heads, all bound together\n",
			st.SessionID, completeness(st), st.Count, st.AppliedCount, len(ev.Chain))
		for _, r := range st.Incomplete {
			fmt.Printf("incomplete: %s\n", reasonText(r))
		}
		for i, p := range ev.Proofs {
			state := "holds"
			if !p.Holds() {
				state = "holds, but the statement is incomplete in a way that covers it"
			}
			what := "not changed"
			switch {
			case p.Kind == attest.Inclusion:
				what = fmt.Sprintf("changed (%s)", p.Entry.Change)
			case p.Kind == attest.Subtree && len(p.Changed) == 0:
				what = "nothing at or under it changed"
			case p.Kind == attest.Subtree:
				what = fmt.Sprintf("%d change(s) at or under it, and no other", len(p.Changed))
			}
			fmt.Printf("proof %d: %s: %s: %s\n", i+1, p.Path, what, state)
			for _, e := range p.Changed {
				fmt.Printf("%s  %s\n", shortCode[e.Change], e.Path)
			}
		}
	}
	if !ev.Complete() {
		if len(ev.Proofs) > 0 {
			fmt.Fprintln(os.Stderr, "layerseal: the statement is incomplete in a way that covers what a proof above speaks of, so it does not show that the path is untouched, nor that the changes listed are all")
		}
		return exitWith(exitIncomplete, nil)
	}
	return nil
}
