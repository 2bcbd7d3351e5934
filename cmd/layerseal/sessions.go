package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
)

func sessionsCommand() *cli.Command {
	return &cli.Command{
		Name:        "sessions",
		Usage:       "list the sessions of the state dir",
		Description: "List the sessions of the state dir: id, state (running, staged, applied, discarded, interrupted), workspace, start and end.",
		Flags: []cli.Flag{
			stateDirFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.BoolFlag{Name: "prune", Usage: "remove the records of finished (applied or discarded) sessions, never a running one, and what the pruning dir still holds; output dirs stay"},
			&cli.StringFlag{Name: "older-than", Usage: "with --prune: only sessions that finished longer ago than this (90m, 36h, 7d)"},
			&cli.BoolFlag{Name: "force", Usage: "with --prune: remove staged and interrupted sessions too, with their change sets"},
			colorFlag(),
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 0 {
				return usageErr("usage: layerseal sessions [--json], or layerseal sessions --prune [--older-than DURATION] [--force] [--json]")
			}
			if !cmd.Bool("prune") && (cmd.IsSet("older-than") || cmd.Bool("force")) {
				return usageErr("sessions: --older-than and --force go with --prune")
			}
			var opt layerseal.PruneOptions
			if cmd.IsSet("older-than") {
				d, err := parseAge(cmd.String("older-than"))
				if err != nil {
					return usageErr("sessions: --older-than %q: %v", cmd.String("older-than"), err)
				}
				opt.OlderThan = d
			}
			if err := needRoot("sessions"); err != nil {
				return err
			}
			if cmd.Bool("prune") {
				opt.Force = cmd.Bool("force")
				return prune(cmd, opt)
			}
			list, err := storeOf(cmd).Sessions()
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if cmd.Bool("json") {
				if list == nil {
					list = []layerseal.SessionInfo{}
				}
				printJSON(list)
				return nil
			}
			writeSessions(os.Stdout, list, useColor(cmd))
			if dir := storeOf(cmd).Pruning(); dir != "" {
				fmt.Printf("# %s holds upper layers of applied or pruned sessions, being removed (`layerseal sessions --prune` finishes it if that stopped)\n", attest.Path(dir))
			}
			return nil
		},
	}
}

// writeSessions prints one aligned line per session under a header, and
// under it what to do next where there is something to do.
// With color the state is coloured: every colour escape is 5 bytes and the
// reset 3, the header's too, so the columns stay aligned.
func writeSessions(w io.Writer, list []layerseal.SessionInfo, color bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[m"
	}
	fmt.Fprintf(tw, "ID\t%s\tWORKSPACE\tSTARTED\tENDED\tCHANGES\tOUT\n", paint("39", "STATE"))
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format("2006-01-02 15:04:05")
	}
	for _, s := range list {
		state := s.State
		if len(s.Skipped) > 0 {
			state += " (partly)"
		}
		if s.State == layerseal.StateBranch {
			state += " " + strings.TrimPrefix(s.GitBranch, "refs/heads/")
		}
		code := map[string]string{layerseal.StateRunning: "36", layerseal.StateStaged: "33", layerseal.StateApplied: "32", layerseal.StateBranch: "33"}[s.State]
		if code == "" {
			code = "31"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.ID, paint(code, state), attest.Path(s.Workspace), stamp(s.Started), stamp(s.Ended), s.Changes, attest.Path(s.Out))
	}
	tw.Flush()
	for _, s := range list {
		if s.Detail != "" {
			fmt.Fprintf(w, "# %s: %s\n", s.ID, s.Detail)
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "# no sessions")
	}
}

// parseAge reads a duration as Go writes one (90m, 36h, 1h30m) or a whole
// number of days (7d).
func parseAge(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseUint(n, 10, 16)
		if err != nil {
			return 0, errors.New("want a duration such as 90m, 36h or 7d")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("want a duration such as 90m, 36h or 7d")
	}
	return d, nil
}

// prune is `sessions --prune`: one line per session removed, then one
// per session kept and why.
func prune(cmd *cli.Command, opt layerseal.PruneOptions) error {
	store := storeOf(cmd)
	list, err := store.Prune(opt)
	if cmd.Bool("json") {
		if list == nil {
			list = []layerseal.Pruned{}
		}
		printJSON(list)
	} else {
		writePruned(os.Stdout, list, store.Dir())
	}
	if err != nil {
		return exitWith(exitFailed, err)
	}
	return nil
}

func writePruned(w io.Writer, list []layerseal.Pruned, dir string) {
	removed := 0
	for _, p := range list {
		if !p.Removed {
			continue
		}
		removed++
		what := ""
		if p.ChangeSet {
			what = "  (its change set was removed with it: --force)"
			if p.State == layerseal.StateApplied {
				what = "  (with what its apply left in the upper layer)"
			}
		}
		fmt.Fprintf(w, "removed %s  %s  %s%s\n", p.ID, p.State, attest.Path(p.Workspace), what)
	}
	for _, p := range list {
		if !p.Removed {
			fmt.Fprintf(w, "# kept %s: %s\n", p.ID, p.Why)
		}
	}
	fmt.Fprintf(w, "# removed %d session(s) from the state dir %s; their output dirs are untouched\n", removed, attest.Path(dir))
}
