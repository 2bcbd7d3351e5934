package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// applyProgress, when set (by the test binary), is called before each
// step of an apply; the tests use it to kill the process at chosen steps.
var applyProgress func(op string, p attest.Path)

// runPolicy adds the configuration file and the --allow and --stage flags
// to the run's policy. A config or glob that cannot be used is a usage
// error; an allow that grants nothing is warned about.
func runPolicy(cmd *cli.Command, base attest.Policy) (attest.Policy, error) {
	c, err := layerseal.LoadConfig(cmd.String("workspace"), cmd.String("config"))
	if err != nil {
		return base, usageErr("run: %v", err)
	}
	allow, err := policy.CompileAll(cmd.StringSlice("allow"))
	if err != nil {
		return base, usageErr("run: --allow: %v", err)
	}
	builtin, _ := policy.CompileAll(policy.BuiltinGlobs()) // protected by every session
	rules := policy.Rules{Allow: allow, Protected: builtin}
	if c != nil {
		rules.Protected = append(rules.Protected, c.Protected...)
	}
	if g, err := layerseal.FindGitHooks(cmd.String("workspace")); err == nil { // an error stops the launch
		hooks, _ := policy.CompileAll(g.Globs())
		rules.Protected = append(rules.Protected, hooks...)
		if top := g.Enclosing(); top != "" {
			fmt.Fprintf(os.Stderr, "layerseal: warning: the workspace lies inside the git repository at %s, not at its root: git run by the agent stops at the workspace (a filesystem boundary in its view) and says it is not a repository; git outside sees the applied changes as usual (to let the agent use git, give the repository's root as --workspace)\n", printable(top))
		}
	}
	for _, g := range rules.UnusedAllows() {
		fmt.Fprintf(os.Stderr, "layerseal: warning: --allow %q matches no protected path: it lifts only the named rules, such as (setuid file) or (grants write), where it matches (`layerseal rules` lists them)\n", g.String())
	}
	p := layerseal.PolicyFrom(c, allow, base)
	if cmd.Bool("stage") {
		p.Apply = policy.ApplyStage
	}
	return p, nil
}

// reportPolicy prints the sweep's violations and the excluded subtrees.
func reportPolicy(st *attest.Statement) {
	for _, v := range foldViolations(st, false) {
		fmt.Fprintf(os.Stderr, "layerseal: protected path %s changed (rule %q): %s%s\n", v.Path, v.Rule, v.Action, v.beneathText())
	}
	if len(st.Violations) > 0 {
		// The first violation's glob, or for a built-in rule on what a
		// change grants, its path when the path is a glob of itself.
		v, example := st.Violations[0], "GLOB"
		switch p := string(v.Path); {
		case !strings.HasPrefix(v.Rule, "(") && !strings.Contains(v.Rule, "'"):
			example = "'" + v.Rule + "'"
		case strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./") == "":
			example = "'" + p + "'"
		}
		fmt.Fprintf(os.Stderr, "layerseal: a run lets the agent change a protected path with --allow, such as --allow %s\n", example)
	}
	for _, x := range st.Excluded {
		fmt.Fprintf(os.Stderr, "layerseal: excluded %s: %s, %d bytes\n", x.Path, plural(x.Entries, "entry", "entries"), x.Bytes)
	}
}

func applyCommand() *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "apply a staged change set, or finish an apply that stopped",
		ArgsUsage: "OUT|SESSION-ID [PATH...]",
		Description: "Apply a session's staged change set to its workspace, or finish an apply that stopped.\n" +
			"Paths changed in the workspace since the launch are conflicts: apply refuses, naming them, and applies nothing.\n" +
			"`apply --force OUT PATH...` overwrites just those paths; `apply --skip OUT PATH...` leaves them (and what lies\n" +
			"beneath them) out, staged for a later apply or discard; `apply --force OUT` overwrites every conflict and\n" +
			"also applies violations the sweep could not revert. PATHs are written as `layerseal diff` prints them.",
		Flags: []cli.Flag{
			stateDirFlag(),
			&cli.BoolFlag{Name: "force", Usage: "overwrite the named PATHs although they changed in the workspace since the launch (no PATH: every one, and violations the sweep could not revert)"},
			&cli.BoolFlag{Name: "skip", Usage: "leave the named PATHs, and what lies beneath them, out of the apply: they stay staged"},
			&cli.StringSliceFlag{Name: "only", Usage: "apply only the changes this `GLOB` matches (and what lies beneath them; repeat for more); the rest stays staged"},
			&cli.StringSliceFlag{Name: "except", Usage: "apply all but the changes this `GLOB` matches (and what lies beneath them; repeat for more); those stay staged"},
			&cli.StringFlag{Name: "git-branch", Usage: "write the change set to the new git branch `NAME`: the agent's commits, then one of what it left uncommitted (on HEAD at launch when it made none); the workspace is left alone and the change set stays staged"},
			jsonResultFlag(),
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if b := cmd.String("git-branch"); b != "" {
				if cmd.NArg() != 1 || cmd.Bool("force") || cmd.Bool("skip") || len(cmd.StringSlice("only")) > 0 || len(cmd.StringSlice("except")) > 0 {
					return usageErr("usage: layerseal apply --git-branch NAME OUT|SESSION-ID")
				}
				return applyGitBranch(cmd, b)
			}
			only, except := cmd.StringSlice("only"), cmd.StringSlice("except")
			if (len(only) > 0 || len(except) > 0) && (cmd.NArg() != 1 || cmd.Bool("skip") || len(only) > 0 && len(except) > 0) {
				return usageErr("usage: layerseal apply [--force] --only GLOB... | --except GLOB... OUT (no PATH, no --skip; one of --only and --except)")
			}
			if cmd.NArg() < 1 || cmd.Bool("force") && cmd.Bool("skip") || cmd.Bool("skip") && cmd.NArg() < 2 {
				return usageErr("usage: layerseal apply [--force | --skip] OUT [PATH...] (--skip needs at least one PATH)")
			}
			if cmd.NArg() > 1 && !cmd.Bool("force") && !cmd.Bool("skip") {
				return usageErr("apply: PATHs need --force (overwrite them) or --skip (leave them out)")
			}
			if err := needRoot("apply"); err != nil {
				return err
			}
			paths, err := parsePaths("apply", cmd.Args().Slice()[1:])
			if err != nil {
				return err
			}
			// An interrupt stops the apply at its next step, which is
			// journaled: the error says how to finish it.
			ctx, stop := signal.NotifyContext(ctx, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
			defer stop()
			prog := startProgress()
			defer prog.end()
			var left []leftJSON
			opt := layerseal.ApplyOptions{Progress: progressFunc(prog), Planned: prog.plan, Stop: func() error {
				if ctx.Err() != nil {
					return layerseal.ErrInterruptedBySignal
				}
				return nil
			}, Left: func(p attest.Path, why string) {
				left = append(left, leftJSON{p, attest.Bytes(why)})
				fmt.Fprintf(os.Stderr, "layerseal: left %s as it is: %s\n", p, printable(why))
			}}
			opt.Only, opt.Except = only, except
			// The applied session's upper layer is removed in the
			// background: on a large change set that takes about as
			// long as the apply itself.
			opt.LeaveRemoval = true
			switch {
			case cmd.Bool("force") && len(paths) == 0:
				opt.Force = true
			case cmd.Bool("force"):
				opt.ForcePaths = paths
			case cmd.Bool("skip"):
				opt.Skip = paths
			}
			store := storeOf(cmd)
			st, err := store.Apply(cmd.Args().First(), opt)
			prog.end()
			if err != nil {
				return exitWith(exitFailed, err)
			}
			msg := fmt.Sprintf("layerseal: applied %d change(s) and %d excluded subtree(s)", len(st.AppliedEntries())-len(left), len(st.Excluded))
			if len(only) > 0 || len(except) > 0 {
				msg = "layerseal: applied the chosen part; " + sessionText(sessionOf(cmd.String("state-dir"), st))
			}
			if len(opt.Skip) > 0 {
				msg = fmt.Sprintf("layerseal: applied all but %d skipped path(s) and what lies beneath them, which stay staged; %s",
					len(opt.Skip), sessionText(sessionOf(cmd.String("state-dir"), st)))
			}
			fmt.Fprintln(os.Stderr, msg+onBranch(sessionOf(cmd.String("state-dir"), st)))
			removeLeftLayers(store, st.SessionID)
			if cmd.Bool("json") {
				info, _ := store.Session(st.SessionID)
				printJSON(map[string]any{"session": info, "left": nonNilSlice(left), "unexamined": layerseal.Unexamined(st)})
			}
			if layerseal.Unexamined(st) {
				fmt.Fprintf(os.Stderr, "layerseal: parts of the change set were not examined, so not applied; they stay in the session's state dir:\n")
				for _, r := range st.Incomplete {
					fmt.Fprintf(os.Stderr, "layerseal: incomplete: %s\n", reasonText(r))
				}
			}
			return nil
		},
	}
}

func discardCommand() *cli.Command {
	return &cli.Command{
		Name:      "discard",
		Usage:     "drop a session's staged change set; the workspace stays as it is",
		ArgsUsage: "OUT|SESSION-ID",
		Flags: []cli.Flag{
			stateDirFlag(),
			&cli.BoolFlag{Name: "force", Usage: "discard even after an apply stopped part way"},
			&cli.StringSliceFlag{Name: "only", Usage: "discard only the changes this `GLOB` matches (and what lies beneath them; repeat for more); the rest stays staged"},
			jsonResultFlag(),
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if only := cmd.StringSlice("only"); len(only) > 0 {
				if cmd.NArg() != 1 || cmd.Bool("force") {
					return usageErr("usage: layerseal discard --only GLOB... OUT|SESSION-ID")
				}
				if err := needRoot("discard"); err != nil {
					return err
				}
				n, err := storeOf(cmd).DiscardPart(cmd.Args().First(), only)
				if err != nil {
					return exitWith(exitFailed, err)
				}
				info, _ := storeOf(cmd).Session(cmd.Args().First())
				fmt.Fprintf(os.Stderr, "layerseal: discarded %d change(s); %s\n", n, sessionText(info))
				if cmd.Bool("json") {
					printJSON(map[string]any{"session": info, "discarded": n})
				}
				return nil
			}
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal discard [--force] OUT|SESSION-ID")
			}
			if err := needRoot("discard"); err != nil {
				return err
			}
			if err := storeOf(cmd).Discard(cmd.Args().First(), cmd.Bool("force")); err != nil {
				return exitWith(exitFailed, err)
			}
			info, _ := storeOf(cmd).Session(cmd.Args().First())
			if info != nil && info.Applied > 0 {
				fmt.Fprintf(os.Stderr, "layerseal: discarded what was still staged of %s; %s\n", cmd.Args().First(), sessionText(info))
			} else {
				fmt.Fprintf(os.Stderr, "layerseal: discarded the change set of %s%s\n", cmd.Args().First(), onBranch(info))
			}
			if cmd.Bool("json") {
				printJSON(map[string]any{"session": info})
			}
			return nil
		},
	}
}

func recoverCommand() *cli.Command {
	return &cli.Command{
		Name:        "recover",
		Usage:       "attest the changes of a session whose supervisor died",
		Description: "Attest the change set of a session whose supervisor died, and keep it staged.",
		ArgsUsage:   "OUT|SESSION-ID",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "the signing key the session was launched with"},
			stateDirFlag(),
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 || cmd.String("key") == "" {
				return usageErr("usage: layerseal recover --key KEY OUT")
			}
			if err := needRoot("recover"); err != nil {
				return err
			}
			key, err := loadPrivateKey(cmd.String("key"))
			if err != nil {
				return err
			}
			out := cmd.Args().First()
			st, err := storeOf(cmd).Recover(out, key)
			if errors.Is(err, layerseal.ErrHeadNotWritten) || errors.Is(err, layerseal.ErrSigstoreNotWritten) {
				fmt.Fprintf(os.Stderr, "layerseal: %s\n", printable(err.Error()))
			} else if err != nil {
				return exitWith(exitFailed, err)
			}
			fmt.Fprintf(os.Stderr, "layerseal: recovered %d change(s), %s; statement %s/%s\n", len(st.Entries), completeness(st), out, layerseal.StatementFile)
			reportPolicy(st)
			ref := sessionArgs(cmd, out)
			fmt.Fprintf(os.Stderr, "layerseal: staged: `layerseal diff %s` shows it; `layerseal apply %s` or `layerseal discard %s`\n", ref, ref, ref)
			return nil
		},
	}
}

// diffCommand shows a staged session's change set: `layerseal diff OUT`.
func diffCommand() *cli.Command {
	return &cli.Command{
		Name:        "diff",
		Usage:       "show a staged change set, or the changes between two checkpoints",
		Description: "Show the change set a session would apply: `diff OUT` for a staged session; `diff A B` between two checkpoints (or a checkpoint and the statement) of one session.",
		ArgsUsage:   "OUT|SESSION-ID | A B | --patch|--stat OUT [PATH...]",
		Flags: append([]cli.Flag{
			stateDirFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.StringFlag{Name: "key", Usage: "with A B: verify both with this public key"},
		}, reviewFlags()...),
		Action: func(_ context.Context, cmd *cli.Command) error {
			if wantsReview(cmd) {
				if cmd.NArg() < 1 || cmd.Bool("json") {
					return usageErr("usage: layerseal diff --patch|--stat OUT|SESSION-ID [PATH...]")
				}
				return diffReview(cmd)
			}
			if cmd.NArg() == 2 {
				return diffArtifacts(cmd)
			}
			if cmd.NArg() != 1 {
				return usageErr("usage: layerseal diff [--json] OUT|SESSION-ID, or layerseal diff [--json] [--key KEY.pub] A B")
			}
			if err := needRoot("diff"); err != nil {
				return err
			}
			st, err := storeOf(cmd).Staged(cmd.Args().First())
			if err != nil {
				return exitWith(exitFailed, stagedErr(cmd, err, cmd.Args().First()))
			}
			notes, err := attributeNotes(cmd, cmd.Args().First())
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if cmd.Bool("json") {
				m := stagedJSON(st)
				addAttributeNotes(m, notes)
				printJSON(m)
				return nil
			}
			digest := statementDigest
			if r, err := storeOf(cmd).OpenReview(cmd.Args().First()); err == nil {
				defer r.Close()
				digest = r.OldDigest
			}
			if cmd.Bool("summary") {
				return writeSummary(os.Stdout, st.AppliedEntries())
			}
			writeStaged(os.Stdout, st, cmd.Bool("all"), useColor(cmd), digest)
			writeAttributeNotes(os.Stdout, "# ", notes)
			return nil
		},
	}
}

// errorsIsClosed reports whether err says the session was applied or
// discarded already.
func errorsIsClosed(err error) bool {
	return errors.Is(err, layerseal.ErrAlreadyApplied) || errors.Is(err, layerseal.ErrDiscarded)
}

type excludedJSON struct {
	Path    attest.Path `json:"path"`
	Entries uint64      `json:"entries"`
	Bytes   uint64      `json:"bytes"`
}

type violationJSON struct {
	Path   attest.Path   `json:"path"`
	Rule   string        `json:"rule"`
	Action attest.Action `json:"action"`
}

// stagedJSON is diff --json's object: show's members for the change set
// to apply, plus the excluded subtrees and the violations.
func stagedJSON(st *attest.Statement) map[string]any {
	applied := *st
	applied.Entries = st.AppliedEntries()
	m := showJSON(&applied, true)
	xs := []excludedJSON{}
	for _, x := range st.Excluded {
		xs = append(xs, excludedJSON(x))
	}
	vs := []violationJSON{}
	for _, v := range st.Violations {
		vs = append(vs, violationJSON(v))
	}
	m["excluded"], m["violations"] = xs, vs
	return m
}

// writeStaged prints one line per change to apply (writeChanges, as show
// does), one per
// excluded subtree ("X", path, counts), then the violations and reasons.
func writeStaged(w io.Writer, st *attest.Statement, all, color bool, oldDigest func(attest.Entry) []byte) {
	writeChanges(w, st.AppliedEntries(), all, color, oldDigest)
	for _, x := range st.Excluded {
		fmt.Fprintf(w, "X  %s\t%s, %d bytes\n", x.Path, plural(x.Entries, "entry", "entries"), x.Bytes)
	}
	fmt.Fprintf(w, "# %d change(s) to apply, %d excluded subtree(s), %s, verified\n", len(st.AppliedEntries()), len(st.Excluded), completeness(st))
	for _, v := range st.Violations {
		fmt.Fprintf(w, "# protected: %s (rule %q): %s\n", v.Path, v.Rule, v.Action)
	}
	if n := layerseal.GitChanges(st); n > 0 {
		fmt.Fprintf(w, "# warning: %s\n", gitWarning(n))
	}
	for _, r := range st.Incomplete {
		fmt.Fprintf(w, "# incomplete: %s\n", reasonText(r))
	}
}

// jsonResultFlag is --json of the commands that change a session: the
// result as one JSON object, the last line on stdout.
func jsonResultFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print the result as one JSON object on stdout: the session as sessions --json shows it, and what the command did"}
}

// leftJSON is a path an apply left as it is, and why.
type leftJSON struct {
	Path attest.Path  `json:"path"`
	Why  attest.Bytes `json:"why"`
}

// nonNilSlice is s, or an empty slice for nil: a JSON array either way.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
