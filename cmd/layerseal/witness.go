package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/tlog"
)

func witnessCommand() *cli.Command {
	return &cli.Command{
		Name:        "witness",
		Usage:       "cosign a log's newest checkpoint",
		Description: "Cosign a log's newest checkpoint after checking it extends the last one this witness cosigned (kept in --state, never rolled back); an inconsistent log: exit 1, nothing signed.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log", Usage: "the log: `DIR` or http(s):// URL"},
			&cli.StringFlag{Name: "log-key", Usage: "the log's verifier key: `LOGPUB` file or the key itself"},
			&cli.StringFlag{Name: "key", Usage: "the witness's private note `KEY` (made by witness keygen)"},
			&cli.StringFlag{Name: "state", Usage: "the witness's state `FILE`: the last checkpoint it cosigned (missing at first use)"},
			&cli.StringFlag{Name: "out", Usage: "also write the cosigned checkpoint to `FILE` (a log DIR gets it in DIR/witness/ too)"},
		},
		Commands: []*cli.Command{witnessKeygenCommand()},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			for _, f := range []string{"log", "log-key", "key", "state"} {
				if cmd.String(f) == "" || cmd.NArg() > 0 {
					return usageErr("usage: layerseal witness --log DIR|URL --log-key LOGPUB --key WITNESSKEY --state FILE [--out FILE]")
				}
			}
			r, err := openLogReader(cmd.String("log"), cmd.String("log-key"))
			if err != nil {
				return err
			}
			w, err := tlog.LoadCosigner(cmd.String("key"))
			if err != nil {
				return usageErr("--key: %v", err)
			}
			res, err := tlog.Cosign(ctx, r, w, cmd.String("state"))
			var inc *tlog.InconsistentError
			switch {
			case errors.As(err, &inc):
				return exitWith(exitFailed, fmt.Errorf("refused, nothing signed: %w (a fork or a rewritten log: keep both checkpoints as evidence; the state file is unchanged)", err))
			case errors.Is(err, tlog.ErrStateRolledBack):
				return exitWith(exitFailed, fmt.Errorf("refused, nothing signed: %w", err))
			case err != nil:
				return exitWith(exitFailed, err)
			}
			if o := cmd.String("out"); o != "" {
				if err := os.WriteFile(o, res.Note, 0o644); err != nil {
					return exitWith(exitFailed, err)
				}
			}
			from := "first use: no earlier checkpoint"
			if res.Old != nil {
				from = fmt.Sprintf("consistent with size %d", res.Old.Size)
			}
			fmt.Fprintf(os.Stderr, "layerseal: cosigned %s at size %d, root %x (%s)\n", res.New.Origin, res.New.Size, res.New.Hash, from)
			if res.Published != "" {
				fmt.Fprintf(os.Stderr, "layerseal: published in %s; `layerseal log add` proves receipts against it\n", res.Published)
			}
			os.Stdout.Write(res.Note)
			return nil
		},
	}
}

func witnessKeygenCommand() *cli.Command {
	return &cli.Command{
		Name:        "keygen",
		Usage:       "make a witness's note key",
		Description: "Make a witness's note key: KEY (private, mode 0600) and KEY.pub (its verifier key, for verify --witness-key).",
		ArgsUsage:   "",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "private key `FILE` to create"},
			&cli.StringFlag{Name: "name", Usage: "the witness's `NAME`, such as example.com/witness"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.String("out") == "" || cmd.String("name") == "" || cmd.NArg() > 0 {
				return usageErr("usage: layerseal witness keygen --out FILE --name NAME")
			}
			vkey, err := tlog.GenerateKey(cmd.String("out"), cmd.String("name"))
			if err != nil {
				return exitWith(exitFailed, err)
			}
			fmt.Printf("witness key:  %s (keep it private)\nverifier key: %s\n              (also in %s.pub: give it to verifiers as --witness-key)\n", cmd.String("out"), vkey, cmd.String("out"))
			return nil
		},
	}
}
