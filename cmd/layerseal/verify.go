package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/urfave/cli/v3"
	"golang.org/x/mod/sumdb/note"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/review"
	"github.com/layerseal/layerseal/tlog"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:        "verify",
		Usage:       "verify an artifact of a run offline",
		Description: "Verify a statement, a checkpoint, a launch record, a signed head, a proof bundle (from prove) or an export (from export) offline, or with --log-key a run's log receipt (OUT, or a HEAD): exit 0 complete (a bundle: holds), 2 incomplete (a bundle: holds, but the statement is incomplete where it matters), 1 not verified or malformed.",
		ArgsUsage:   "STATEMENT|CHECKPOINT|LAUNCH|HEAD|BUNDLE|EXPORT|OUT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "public `KEY.pub` (from keygen)"},
			&cli.StringFlag{Name: "launch", Usage: "the run's `launch.json`: also check the statement is bound to it"},
			&cli.StringFlag{Name: "checkpoints", Usage: "the run's checkpoints `DIR` (default: checkpoints/ beside the statement, when it exists)"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON"},
			&cli.StringFlag{Name: "session", Usage: "refuse (exit 1) a bundle, export or head that is not of session `ID`"},
			&cli.StringFlag{Name: "logs", Usage: "also check the agent's output files in `DIR` (from run --log-output) against the digests the statement records (exit 1 where one differs)"},
			&cli.StringFlag{Name: "workspace", Usage: "also check that `DIR` holds, path by path, what the statement says was applied (exit 1 where it does not; 3 when the change set went to a git branch instead)"},
			stateDirFlag(),
			&cli.StringFlag{Name: "log-key", Usage: "check the log receipt of OUT's statement head (or of HEAD) against the log's verifier key `LOGPUB`"},
			&cli.StringSliceFlag{Name: "witness-key", Usage: "a witness's verifier key `W` (file or key; repeatable)"},
			&cli.IntFlag{Name: "witnesses", Usage: "how many of the --witness-key witnesses must have cosigned the receipt's checkpoint (`N`)", DefaultText: "all given"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() == 1 && cmd.String("key") != "" && cmd.String("log-key") != "" {
				return verifyReceipt(cmd)
			}
			const usage = "usage: layerseal verify --key KEY.pub [--launch launch.json] [--session ID] STATEMENT|CHECKPOINT|LAUNCH|HEAD|BUNDLE|EXPORT|OUT"
			switch {
			case cmd.NArg() == 0:
				return usageErr("verify needs what to verify: a run's output dir, or one of its files\n" + usage)
			case cmd.NArg() > 1:
				return usageErr("verify takes one artifact, not %d\n%s", cmd.NArg(), usage)
			case cmd.String("key") == "":
				return usageErr("verify needs --key KEY.pub: the public key the session was signed with (keygen wrote it beside the private key); `layerseal show` prints an artifact without checking it\n" + usage)
			}
			pub, err := loadPublicKey(cmd.String("key"))
			if err != nil {
				return err
			}
			path, out := artifactArg(cmd.Args().First())
			env, err := attest.ReadArtifact(path)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if attest.IsExport(env) {
				return verifyExport(cmd, path, env, pub)
			}
			if bytes.HasPrefix(env, []byte(`{"format":`)) {
				return verifyBundle(cmd, path, env, pub)
			}
			if attest.PredicateType(env) == attest.HeadPredicateType {
				return verifyHead(cmd, path, env, pub)
			}
			if cmd.String("session") != "" {
				return usageErr("verify: --session is for a proof bundle, an export or a head; a statement or checkpoint names its session in what verify prints")
			}
			opts := attest.VerifyOptions{Checkpoints: cmd.String("checkpoints")}
			if l := cmd.String("launch"); l == "" && out != "" {
				// An output dir: its statement bound to its launch record.
				if opts.Launch, err = attest.ReadArtifact(filepath.Join(out, attest.LaunchFile)); err != nil {
					return exitWith(exitFailed, err)
				}
			} else if l != "" {
				if opts.Launch, err = attest.ReadArtifact(l); err != nil {
					return exitWith(exitFailed, err)
				}
			}
			a, err := attest.Verify(path, env, pub, opts)
			if err != nil && !errors.Is(err, attest.ErrIncomplete) {
				if cmd.Bool("json") {
					printJSON(map[string]any{"verified": false, "error": verifyClass(err), "detail": err.Error()})
				}
				return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
			}
			switch {
			case a.Checkpoint != nil:
				printCheckpoint(cmd, a)
			case a.Launch != nil:
				printLaunch(cmd, a.Launch)
			default:
				printStatement(cmd, a)
			}
			if dir := cmd.String("logs"); dir != "" {
				if a.Statement == nil {
					return usageErr("verify: --logs is for a statement (statement.json of a run with --log-output)")
				}
				if err := checkLogs(dir, a.Statement); err != nil {
					return err
				}
			}
			if ws := cmd.String("workspace"); ws != "" && a.Statement != nil {
				if err := checkWorkspace(ws, a.Statement, sessionOf(cmd.String("state-dir"), a.Statement)); err != nil {
					return err
				}
			}
			if !a.Complete() {
				return exitWith(exitIncomplete, nil)
			}
			return nil
		},
	}
}

// printStatement prints what verify found of a statement.
func printStatement(cmd *cli.Command, a *attest.Artifact) {
	st := a.Statement
	chain := ""
	if len(a.Chain) > 0 {
		chain = fmt.Sprintf("checkpoint chain: %d checkpoint(s), bound to the statement", len(a.Chain))
	}
	info := sessionOf(cmd.String("state-dir"), st)
	if cmd.Bool("json") {
		m := reportJSON(st, info)
		m["verified"], m["complete"], m["checkpoints"], m["session_id"], m["launch_checked"] = true, st.Complete, chain, st.SessionID, a.LaunchChecked
		printJSON(m)
		return
	}
	fmt.Printf("verified: %s, %d change(s), session %s\n", completeness(st), len(st.Entries), st.SessionID)
	if chain != "" {
		fmt.Println(chain)
	}
	if !a.LaunchChecked {
		fmt.Println("launch record not checked (use --launch)")
	}
	writeReport(os.Stdout, "", st, info, true)
}

// printCheckpoint prints what verify found of a checkpoint and the chain
// before it.
func printCheckpoint(cmd *cli.Command, a *attest.Artifact) {
	cp := a.Checkpoint
	if cmd.Bool("json") {
		printJSON(map[string]any{"verified": true, "checkpoint": cp.Seq, "complete": cp.Complete, "unchanged": cp.Unchanged,
			"session_id": cp.SessionID, "count": cp.Count, "incomplete": reasonsJSON(cp.Incomplete), "launch_checked": a.LaunchChecked})
		return
	}
	state := ""
	switch {
	case cp.Unchanged:
		state = fmt.Sprintf(", unchanged since checkpoint %d", cp.SameAs)
	case cp.Base != 0:
		state = fmt.Sprintf(", %d change(s) listed since checkpoint %d", len(cp.Entries)+len(cp.Removed), cp.Base)
	}
	// The chain checked is the one up to this checkpoint: later ones may
	// exist, and are not read.
	chain := "the first of its chain"
	if before := cp.Log.Size - 1; before > 0 {
		chain = fmt.Sprintf("and the %s before it in its chain", plural(before, "checkpoint", "checkpoints"))
	}
	fmt.Printf("verified: checkpoint %d, %s%s, %s, %d change(s), session %s\n",
		cp.Seq, chain, state, completenessOf(cp.Complete, len(cp.Incomplete)), cp.Count, cp.SessionID)
	for _, r := range cp.Incomplete {
		fmt.Printf("incomplete: %s\n", reasonText(r))
	}
}

// printLaunch prints what verify found of a launch record.
func printLaunch(cmd *cli.Command, l *attest.LaunchRecord) {
	if cmd.Bool("json") {
		printJSON(map[string]any{"verified": true, "launch": true, "session_id": l.SessionID, "workspace": l.Workspace, "started": l.Started})
		return
	}
	writeLaunch(os.Stdout, l, "verified")
}

// checkWorkspace prints every path where ws disagrees with what st says
// was applied; it fails (exit 1) when there is one. A session written to
// a git branch and not applied (info, when the state dir says so) is not
// in the workspace by design: that is said, with exit 3.
func checkWorkspace(ws string, st *attest.Statement, info *layerseal.SessionInfo) error {
	if info != nil && info.State == layerseal.StateBranch {
		fmt.Printf("workspace: not applied: the change set went to git branch %s (commit %s) and is still staged\n", strings.TrimPrefix(info.GitBranch, "refs/heads/"), info.GitCommit)
		return exitWith(exitOnBranch, fmt.Errorf("workspace %q does not hold the change set: it was written to git branch %s (commit %s) instead, and the workspace was left as it was; `git switch %s` takes it",
			ws, strings.TrimPrefix(info.GitBranch, "refs/heads/"), info.GitCommit, strings.TrimPrefix(info.GitBranch, "refs/heads/")))
	}
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

// checkLogs prints, for each log st records, whether its file in dir holds
// what st says; it fails (exit 1) when one does not.
func checkLogs(dir string, st *attest.Statement) error {
	res, err := layerseal.CheckLogs(dir, st)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	bad := 0
	for _, l := range st.Logs {
		if err := res[l.Name]; err != nil {
			bad++
			fmt.Printf("logs: %s: %s\n", l.Name, printable(err.Error()))
			continue
		}
		fmt.Printf("logs: %s: matches the statement\n", l.Name)
	}
	if bad > 0 {
		return exitWith(exitFailed, fmt.Errorf("%d log file(s) in %q differ from what the statement records", bad, dir))
	}
	return nil
}

// loadPublicKey reads verify's and show's --key, saying so when it is a
// private key.
func loadPublicKey(path string) (attest.PublicKey, error) {
	pub, err := attest.LoadPublicKey(path)
	if err != nil {
		if _, perr := attest.LoadPrivateKey(path); perr == nil {
			return attest.PublicKey{}, usageErr("--key %q is a private key: give its public key (%s.pub, from keygen)", path, path)
		}
		return attest.PublicKey{}, exitWith(exitUsage, err)
	}
	return pub, nil
}

func showCommand() *cli.Command {
	return &cli.Command{
		Name:        "show",
		Usage:       "summarise a statement, a checkpoint or a launch record",
		Description: "Summarise a statement, a checkpoint or a launch record (a statement like `git status --short`; --key also verifies it).",
		ArgsUsage:   "STATEMENT|CHECKPOINT|LAUNCH|OUT",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
			&cli.StringFlag{Name: "key", Usage: "verify with this public `KEY.pub` first"},
			stateDirFlag(),
			allFlag(),
			colorFlag(),
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal show [--json] [--key KEY.pub] STATEMENT|CHECKPOINT|LAUNCH|OUT")
			}
			var pub attest.PublicKey
			if k := cmd.String("key"); k != "" {
				p, err := loadPublicKey(k)
				if err != nil {
					return err
				}
				pub = p
			}
			path, _ := artifactArg(cmd.Args().First())
			env, err := attest.ReadArtifact(path)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if l, err := attest.ReadLaunch(env); err == nil {
				return showLaunch(cmd, path, env, l, pub)
			}
			a, err := attest.Load(path, env, pub)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			st := a.Statement
			if a.Checkpoint != nil {
				// All the changes so far, shown as a statement shows them.
				st = &attest.Statement{SessionID: a.SessionID(), Complete: a.Checkpoint.Complete, Incomplete: a.Checkpoint.Incomplete, Entries: a.Entries}
			}
			var info *layerseal.SessionInfo
			if a.Checkpoint == nil {
				info = sessionOf(cmd.String("state-dir"), st)
			}
			notes, err := sessionAttributeNotes(cmd, info)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if cmd.Bool("json") {
				m := showJSON(st, !pub.IsZero())
				if a.Checkpoint != nil {
					delete(m, "exit")
					m["checkpoint"] = a.Checkpoint.Seq
					m["egress"] = egressJSON(a.Checkpoint.Egress)
				} else {
					for k, v := range reportJSON(st, info) {
						m[k] = v
					}
					addAttributeNotes(m, notes)
				}
				printJSON(m)
				return nil
			}
			writeShort(os.Stdout, st, !pub.IsZero(), cmd.Bool("all"), useColor(cmd))
			if a.Checkpoint == nil {
				if l := launchBeside(path); l != nil && l.Sandbox.Network == layerseal.NetworkHost && l.SessionID == st.SessionID {
					fmt.Printf("# %s\n", hostNetworkWarning)
				}
				writeReport(os.Stdout, "# ", st, info, cmd.Bool("all"))
				writeAttributeNotes(os.Stdout, "# ", notes)
				writeViewBeside(os.Stdout, "# ", path, st.SessionID)
			} else {
				writeEgress(os.Stdout, "# ", a.Checkpoint.Egress)
				for _, r := range st.Incomplete {
					fmt.Printf("# incomplete: %s\n", reasonText(r))
				}
			}
			return nil
		},
	}
}

// showLaunch is `show` of a launch record.
func showLaunch(cmd *cli.Command, path string, env []byte, l *attest.LaunchRecord, pub attest.PublicKey) error {
	state := "signature not checked (use --key)"
	if !pub.IsZero() {
		a, err := attest.Verify(path, env, pub, attest.VerifyOptions{})
		if err != nil {
			return exitWith(exitFailed, fmt.Errorf("%s: %w", path, err))
		}
		l, state = a.Launch, "verified"
	}
	if cmd.Bool("json") {
		printJSON(map[string]any{"launch": true, "verified": !pub.IsZero(), "session_id": l.SessionID, "workspace": l.Workspace,
			"started": l.Started, "agent": l.Agent.Args, "key_id": l.KeyID,
			"sandbox": map[string]any{"network": l.Sandbox.Network, "seccomp": l.Sandbox.Seccomp, "scoped": nonNilStrings(l.Sandbox.Scoped), "allow_net": nonNilStrings(l.Sandbox.AllowNet),
				"view": viewName(l.Sandbox), "read_only": nonNilStrings(l.Sandbox.ReadOnly)},
			"policy": map[string]any{
				"apply": orDefault(l.Policy.Apply, "auto"), "exclude": l.Policy.Exclude, "protect": l.Policy.Protect, "allow": l.Policy.Allow}})
		return nil
	}
	writeLaunch(os.Stdout, l, state)
	return nil
}

type changeJSON struct {
	Path   attest.Path   `json:"path"`
	Change attest.Change `json:"change"`
	Type   attest.Type   `json:"type,omitempty"`
	Old    attest.Type   `json:"old_type,omitempty"`
	Meta   *review.Meta  `json:"meta,omitempty"` // review.Metadata
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
		c := changeJSON{Path: e.Path, Change: e.Change, Meta: review.Metadata(e)}
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
		"exit":       map[string]any{"code": st.Exit.Code, "signal": st.Exit.Signal, "unknown": st.Exit.Unknown, "interrupt": st.Exit.Interrupt},
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

// writeShort prints one line per change (writeChanges: code, two spaces,
// path in its text form, bytes that are not printable %XX-escaped;
// renames and whole added or deleted directories folded unless all),
// then a count line (writeReport prints the rest).
func writeShort(w io.Writer, st *attest.Statement, verified, all, color bool) {
	writeChanges(w, st.Entries, all, color, statementDigest)
	state := "signature not checked (use --key)"
	if verified {
		state = "verified"
	}
	fmt.Fprintf(w, "# %d change(s), %s, %s\n", len(st.Entries), completeness(st), state)
}

func printJSON(v any) {
	b, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		fmt.Fprintf(os.Stderr, "layerseal: %v\n", err)
		return
	}
	fmt.Println(string(b))
}

// verifyReceipt is `verify --log-key`: the head (OUT's statement head, or
// the head file given) is signed by the session key, its receipt proves it
// is in the log, cosigned by enough witnesses, and, given OUT, the head is
// the statement's.
func verifyReceipt(cmd *cli.Command) error {
	pub, err := loadPublicKey(cmd.String("key"))
	if err != nil {
		return err
	}
	logKey, err := tlog.ParseVerifier(cmd.String("log-key"))
	if err != nil {
		return usageErr("--log-key: %v", err)
	}
	var ws []note.Verifier
	for _, k := range cmd.StringSlice("witness-key") {
		w, err := tlog.ParseCosignatureVerifier(k)
		if err != nil {
			return usageErr("--witness-key: %v", err)
		}
		ws = append(ws, w)
	}
	min := len(ws)
	if cmd.IsSet("witnesses") {
		min = cmd.Int("witnesses")
		if min < 0 || min > len(ws) {
			return usageErr("--witnesses %d: give a number from 0 to the %d --witness-key given", min, len(ws))
		}
	}
	arg, headFile, stFile := cmd.Args().First(), cmd.Args().First(), ""
	if fi, err := os.Stat(arg); err == nil && fi.IsDir() {
		stFile = filepath.Join(arg, layerseal.StatementFile)
		headFile = filepath.Join(arg, attest.HeadFile(layerseal.StatementFile))
	} else if env, err := attest.ReadArtifact(arg); err == nil && attest.PredicateType(env) == attest.StatementPredicateType {
		// A statement: its head lies beside it.
		stFile, headFile = arg, filepath.Join(filepath.Dir(arg), attest.HeadFile(filepath.Base(arg)))
	}
	head, err := attest.ReadArtifact(headFile)
	if err != nil {
		return exitWith(exitFailed, err)
	}
	h, err := attest.VerifyHead(head, pub)
	if err != nil {
		return exitWith(exitFailed, fmt.Errorf("%s: %w", headFile, err))
	}
	if stFile != "" {
		env, err := attest.ReadArtifact(stFile)
		if err != nil {
			return exitWith(exitFailed, err)
		}
		a, err := attest.Verify(stFile, env, pub, attest.VerifyOptions{})
		if err != nil && !errors.Is(err, attest.ErrIncomplete) {
			return exitWith(exitFailed, fmt.Errorf("%s: %w", stFile, err))
		}
		if a.Statement == nil || !attest.HeadOf(a.Statement).Equal(h) {
			return exitWith(exitFailed, fmt.Errorf("%s is not the head of %s", headFile, stFile))
		}
	}
	rf := tlog.ReceiptFile(headFile)
	rb, err := os.ReadFile(rf)
	if errors.Is(err, os.ErrNotExist) {
		return exitWith(exitFailed, fmt.Errorf("no log receipt %s: the session was not anchored (layerseal log add LOG %s)", rf, filepath.Dir(headFile)))
	}
	if err != nil {
		return exitWith(exitFailed, err)
	}
	r, err := tlog.ParseReceipt(rb)
	if err != nil {
		return exitWith(exitFailed, fmt.Errorf("%s: %w", rf, err))
	}
	an, err := tlog.VerifyReceipt(r, head, logKey, ws, min)
	if err != nil {
		return exitWith(exitFailed, fmt.Errorf("%s: %w", rf, err))
	}
	fmt.Printf("verified: head of session %s is entry %d of log %s, in its checkpoint of size %d\n", h.SessionID, an.Index, an.Checkpoint.Origin, an.Checkpoint.Size)
	fmt.Printf("witnesses: %d of %d given cosigned it (%d required)", len(an.Witnesses), len(ws), min)
	if len(an.Witnesses) > 0 {
		fmt.Printf(": %s", strings.Join(an.Witnesses, ", "))
	}
	fmt.Println()
	if !h.Complete {
		fmt.Printf("the statement is INCOMPLETE (%d reason(s))\n", len(h.Incomplete))
		return exitWith(exitIncomplete, nil)
	}
	return nil
}

// artifactArg is the file an artifact argument names: the file itself, or
// for a run's output dir its statement (and out is that dir).
func artifactArg(arg string) (path, out string) {
	if fi, err := os.Stat(arg); err == nil && fi.IsDir() {
		return filepath.Join(arg, attest.StatementFile), arg
	}
	return arg, ""
}
