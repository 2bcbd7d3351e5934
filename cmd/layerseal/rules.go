package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/policy"
)

func rulesCommand() *cli.Command {
	return &cli.Command{
		Name:  "rules",
		Usage: "print the built-in rules every session holds",
		Description: "Print the built-in rules every session holds: each glob or named rule, the tool that acts there and why.\n" +
			"A change that breaks a rule is reverted and the run staged; `run --allow GLOB` lets a path through for one run.\n" +
			"Named rules, in parentheses, are checked by what a change is (a setuid file, a device node), wherever it lies.\n" +
			"With --workspace DIR, also what a session over DIR adds: the protected globs of its layerseal.yaml (or --config)\n" +
			"and the hooks directories core.hooksPath names in it (and config files git includes from it), read from the\n" +
			"repository's, this user's ($HOME) and the system's git config as `run` reads them at launch: run `rules` as you\n" +
			"run `run`.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workspace", Usage: "also print what a session over `DIR` adds"},
			&cli.StringFlag{Name: "config", Usage: "the workspace's configuration `FILE` (default: DIR/" + policy.FileName + ")"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON: {\"builtin\": [{\"rule\", \"tool\", \"reason\"}...], and with --workspace \"workspace\": [...]}"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() > 0 {
				return usageErr("rules takes no arguments (for what a workspace adds: layerseal rules --workspace DIR)")
			}
			if cmd.String("config") != "" && cmd.String("workspace") == "" {
				return usageErr("rules: --config needs --workspace")
			}
			var ws []policy.RuleRow
			if dir := cmd.String("workspace"); dir != "" {
				var err error
				if ws, err = layerseal.WorkspaceRules(dir, cmd.String("config")); err != nil {
					return exitWith(exitFailed, err)
				}
			}
			if cmd.Bool("json") {
				type row struct {
					Rule   string `json:"rule"`
					Tool   string `json:"tool"`
					Reason string `json:"reason"`
				}
				rows := func(rs []policy.RuleRow) []row {
					out := []row{}
					for _, r := range rs {
						out = append(out, row(r))
					}
					return out
				}
				v := struct {
					Builtin   []row `json:"builtin"`
					Workspace []row `json:"workspace,omitempty"`
				}{rows(policy.Builtin()), nil}
				if cmd.String("workspace") != "" {
					v.Workspace = rows(ws)
				}
				printJSON(v)
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
			fmt.Fprintln(w, "RULE\tTOOL\tREASON")
			for _, r := range policy.Builtin() {
				fmt.Fprintf(w, "%s\t%s\t%s\n", printable(r.Rule), printable(r.Tool), printable(r.Reason))
			}
			if dir := cmd.String("workspace"); dir != "" {
				fmt.Fprintf(w, "\nadded for the workspace %s:\n", printable(dir))
				if len(ws) == 0 {
					fmt.Fprintln(w, "(none)")
				}
				for _, r := range ws {
					fmt.Fprintf(w, "%s\t%s\t%s\n", printable(r.Rule), printable(r.Tool), printable(r.Reason))
				}
			}
			return w.Flush()
		},
	}
}
