package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/go-json-experiment/json"
	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:      "verify",
		Usage:     "verify a statement or a checkpoint offline: exit 0 complete, 2 incomplete, 1 not verified or malformed",
		ArgsUsage: "STATEMENT|CHECKPOINT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "public key (KEY.pub from keygen)"},
			&cli.StringFlag{Name: "launch", Usage: "the run's launch.json: also check the statement is bound to it"},
			&cli.StringFlag{Name: "checkpoints", Usage: "the run's checkpoints `DIR` (default: checkpoints/ beside the statement, when it exists)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.StringFlag{Name: "workspace", Usage: "also check that `DIR` holds, path by path, what the statement says was applied (exit 1 where it does not)"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 || cmd.String("key") == "" {
				return usageErr("usage: layerseal verify --key KEY.pub [--launch launch.json] STATEMENT")
			}
			pub, err := attest.LoadPublicKey(cmd.String("key"))
			if err != nil {
				return exitWith(exitUsage, err)
			}
			env, err := readArtifact(cmd.Args().First())
			if err != nil {
				return exitWith(exitFailed, err)
			}
			var launch []byte
			if l := cmd.String("launch"); l != "" {
				if launch, err = readArtifact(l); err != nil {
					return exitWith(exitFailed, err)
				}
			}
			if cp, err := attest.ReadCheckpoint(env); err == nil {
				return verifyCheckpointFile(cmd, pub, cmd.Args().First(), env, cp, launch)
			}
			st, err := attest.VerifyStatement(env, pub, launch)
			chain := ""
			if err == nil {
				dir := cmd.String("checkpoints")
				if beside := filepath.Join(filepath.Dir(cmd.Args().First()), layerseal.CheckpointDir); dir == "" && isDir(beside) {
					dir = beside
				}
				chain, err = verifyStatementChain(st, pub, dir, launch)
			}
			if err != nil {
				if cmd.Bool("json") {
					printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
				}
				return exitWith(exitFailed, fmt.Errorf("%s: %w", cmd.Args().First(), err))
			}
			if cmd.Bool("json") {
				printJSON(map[string]any{"verified": true, "complete": st.Complete, "checkpoints": chain, "session_id": st.SessionID,
					"count": st.Count, "incomplete": reasonsJSON(st.Incomplete), "launch_checked": launch != nil})
			} else {
				fmt.Printf("verified: %s, %d change(s), session %s\n", completeness(st), len(st.Entries), st.SessionID)
				if chain != "" {
					fmt.Println(chain)
				}
				for _, r := range st.Incomplete {
					fmt.Printf("incomplete: %s\n", reasonText(r))
				}
			}
			if ws := cmd.String("workspace"); ws != "" {
				if err := checkWorkspace(ws, st); err != nil {
					return err
				}
			}
			if !st.Complete {
				return exitWith(exitIncomplete, nil)
			}
			return nil
		},
	}
}

// checkWorkspace prints every path where ws disagrees with what st says
// was applied; it fails (exit 1) when there is one.
func checkWorkspace(ws string, st *attest.Statement) error {
	ms, err := layerseal.CheckWorkspace(ws, st)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	for _, m := range ms {
		fmt.Printf("workspace: %s: %s\n", m.Path, printable(m.What))
	}
	if len(ms) > 0 {
		return exitWith(exitFailed, fmt.Errorf("workspace %q disagrees with the statement at %d path(s)", ws, len(ms)))
	}
	fmt.Printf("workspace: %d applied path(s) agree\n", len(st.AppliedEntries()))
	return nil
}

func showCommand() *cli.Command {
	return &cli.Command{
		Name:      "show",
		Usage:     "summarise a statement or a checkpoint like `git status --short` (--key also verifies it)",
		ArgsUsage: "STATEMENT|CHECKPOINT",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "key", Usage: "verify with this public key first"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal show [--json] [--key KEY.pub] STATEMENT|CHECKPOINT")
			}
			var pub []byte
			if k := cmd.String("key"); k != "" {
				p, err := attest.LoadPublicKey(k)
				if err != nil {
					return exitWith(exitUsage, err)
				}
				pub = p
			}
			a, err := readAny(cmd.Args().First(), pub)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			st := a.st
			if a.cp != nil {
				// All the changes so far, shown as a statement shows them.
				st = &attest.Statement{SessionID: a.session, Complete: a.cp.Complete, Incomplete: a.cp.Incomplete, Entries: a.entries}
			}
			if cmd.Bool("json") {
				m := showJSON(st, pub != nil)
				if a.cp != nil {
					delete(m, "exit")
					m["checkpoint"] = a.cp.Seq
				}
				printJSON(m)
				return nil
			}
			writeShort(os.Stdout, st, pub != nil)
			return nil
		},
	}
}

// maxArtifact bounds what verify and show read.
const maxArtifact = 512 << 20

func readArtifact(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxArtifact+1))
	if err != nil {
		return nil, fmt.Errorf("read %q: %w", path, err)
	}
	if len(b) > maxArtifact {
		return nil, fmt.Errorf("%q is over %d bytes", path, maxArtifact)
	}
	return b, nil
}

type changeJSON struct {
	Path   attest.Path   `json:"path"`
	Change attest.Change `json:"change"`
	Type   attest.Type   `json:"type,omitempty"`
	Old    attest.Type   `json:"old_type,omitempty"`
}

type reasonJSON struct {
	Code   attest.Code  `json:"code"`
	Path   attest.Path  `json:"path,omitempty"`
	Detail attest.Bytes `json:"detail"`
}

func reasonsJSON(rs []attest.Reason) []reasonJSON {
	out := make([]reasonJSON, 0, len(rs))
	for _, r := range rs {
		out = append(out, reasonJSON{r.Code, r.Path, attest.Bytes(r.Detail)})
	}
	return out
}

// showJSON is show --json's object: complete, incomplete, changes, and the
// statement's identity.
func showJSON(st *attest.Statement, verified bool) map[string]any {
	changes := make([]changeJSON, 0, len(st.Entries))
	for _, e := range st.Entries {
		c := changeJSON{Path: e.Path, Change: e.Change}
		if e.New != nil {
			c.Type = e.New.Type
		}
		if e.Old != nil {
			c.Old = e.Old.Type
		}
		changes = append(changes, c)
	}
	return map[string]any{
		"session_id": st.SessionID,
		"verified":   verified,
		"complete":   st.Complete,
		"incomplete": reasonsJSON(st.Incomplete),
		"changes":    changes,
		"exit":       map[string]any{"code": st.Exit.Code, "signal": st.Exit.Signal},
	}
}

// shortCode is show's one-letter column, after git status --short where
// the meanings agree.
var shortCode = map[attest.Change]string{
	attest.Added:      "A",
	attest.Modified:   "M",
	attest.Metadata:   "m",
	attest.Deleted:    "D",
	attest.Replaced:   "R",
	attest.TypeChange: "T",
}

// writeShort prints one line per change: code, two spaces, path in its
// text form (bytes that are not printable are %XX-escaped), then the
// incomplete reasons.
func writeShort(w io.Writer, st *attest.Statement, verified bool) {
	for _, e := range st.Entries {
		fmt.Fprintf(w, "%s  %s\n", shortCode[e.Change], e.Path)
	}
	state := "signature not checked (use --key)"
	if verified {
		state = "verified"
	}
	fmt.Fprintf(w, "# %d change(s), %s, %s\n", len(st.Entries), completeness(st), state)
	for _, r := range st.Incomplete {
		fmt.Fprintf(w, "# incomplete: %s\n", reasonText(r))
	}
}

func printJSON(v any) {
	b, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		fmt.Fprintf(os.Stderr, "layerseal: %v\n", err)
		return
	}
	fmt.Println(string(b))
}
