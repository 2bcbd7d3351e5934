package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/attest"
)

func checkpointCommand() *cli.Command {
	return &cli.Command{
		Name:        "checkpoint",
		Usage:       "take a checkpoint of a running session now",
		Description: "Ask a running session to take a checkpoint now (as SIGUSR1 to its supervisor does).",
		ArgsUsage:   "OUT|SESSION-ID",
		Flags:       []cli.Flag{stateDirFlag(), &cli.BoolFlag{Name: "json", Usage: "print the checkpoint as one JSON object: checkpoint, file, count, unchanged, complete, head_problem"}},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal checkpoint OUT|SESSION-ID")
			}
			if err := needRoot("checkpoint"); err != nil {
				return err
			}
			res, err := storeOf(cmd).RequestCheckpoint(cmd.Args().First())
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if cmd.Bool("json") {
				printJSON(map[string]any{"checkpoint": res.Seq, "file": res.File, "count": res.Count, "unchanged": res.Unchanged,
					"complete": res.Complete, "head_problem": res.HeadProblem})
				if res.HeadProblem != "" {
					fmt.Fprintf(os.Stderr, "layerseal: %s\n", res.HeadProblem)
				}
				return nil
			}
			state := fmt.Sprintf("%d change(s)", res.Count)
			if res.Unchanged {
				state = "unchanged, " + state
			}
			if !res.Complete {
				state += ", INCOMPLETE"
			}
			fmt.Printf("checkpoint %d: %s\t%s\n", res.Seq, state, res.File)
			if res.HeadProblem != "" {
				fmt.Fprintf(os.Stderr, "layerseal: %s\n", res.HeadProblem)
			}
			return nil
		},
	}
}

// diffArtifacts is `diff A B`: what changed in the merged view between
// two checkpoints of one session, or a checkpoint and the final
// statement.
func diffArtifacts(cmd *cli.Command) error {
	var pub attest.PublicKey
	if k := cmd.String("key"); k != "" {
		p, err := attest.LoadPublicKey(k)
		if err != nil {
			return exitWith(exitUsage, err)
		}
		pub = p
	}
	var points [2]*attest.Artifact
	for i := range points {
		path := cmd.Args().Get(i)
		env, err := attest.ReadArtifact(path)
		if err != nil {
			return exitWith(exitFailed, err)
		}
		if points[i], err = attest.Load(path, env, pub); err != nil {
			return exitWith(exitFailed, err)
		}
	}
	a, b := points[0], points[1]
	diffs, err := attest.Diff(a, b)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	changes := make([]changeJSON, 0, len(diffs))
	for _, d := range diffs {
		changes = append(changes, changeJSON{Path: d.Path, Change: d.Change, Type: d.Type, Old: d.Old, Meta: differenceMeta(d)})
	}
	if cmd.Bool("json") {
		printJSON(map[string]any{"session_id": a.SessionID(), "verified": !pub.IsZero(), "from": a.Path, "to": b.Path, "changes": changes})
		return nil
	}
	writeDiff(os.Stdout, changes, !pub.IsZero())
	return nil
}

func writeDiff(w io.Writer, changes []changeJSON, verified bool) {
	for _, c := range changes {
		fmt.Fprintf(w, "%s  %s%s\n", shortCode[c.Change], c.Path, metaText(c.Meta))
	}
	state := "signatures not checked (use --key)"
	if verified {
		state = "verified"
	}
	fmt.Fprintf(w, "# %d change(s) between them, %s\n", len(changes), state)
}

func verifyClass(err error) string {
	if errors.Is(err, attest.ErrMalformed) {
		return "malformed"
	}
	if errors.Is(err, attest.ErrChain) {
		return "chain"
	}
	return "not-verified"
}

func completenessOf(complete bool, n int) string {
	if complete {
		return "complete"
	}
	return fmt.Sprintf("INCOMPLETE (%d reason(s))", n)
}
