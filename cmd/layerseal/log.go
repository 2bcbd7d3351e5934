package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/urfave/cli/v3"
	"k8s.io/klog/v2"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/tlog"
)

func init() {
	// tessera's background work logs through klog; the commands say
	// themselves what happened.
	klog.SetLogger(logr.Discard())
}

// logTimeout bounds how long log add (and run --log) waits for the log.
const logTimeout = 30 * time.Second

func logCommand() *cli.Command {
	return &cli.Command{
		Name:        "log",
		Usage:       "a transparency log of signed heads",
		Description: "A transparency log of signed heads: make one, anchor a session in it, check it.",
		Commands: []*cli.Command{
			logInitCommand(),
			logAddCommand(),
			logCheckCommand(),
		},
	}
}

func logInitCommand() *cli.Command {
	return &cli.Command{
		Name:        "init",
		Usage:       "make a log",
		Description: "Make a log in DIR (empty or missing), signed by the note key LOGKEY (made when missing); prints the verifier key to give to verifiers and witnesses.",
		ArgsUsage:   "DIR",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "the log's private note `LOGKEY` file (LOGKEY.pub beside it is its verifier key)"},
			&cli.StringFlag{Name: "origin", Usage: "the log's `NAME` when the key is made, such as example.com/layerseal-log", DefaultText: "layerseal-log-HOSTNAME"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 || cmd.String("key") == "" {
				return usageErr("usage: layerseal log init DIR --key LOGKEY [--origin NAME]")
			}
			dir, key := cmd.Args().First(), cmd.String("key")
			made := false
			if _, err := os.Stat(key); errors.Is(err, os.ErrNotExist) {
				origin := cmd.String("origin")
				if origin == "" {
					h, _ := os.Hostname()
					origin = "layerseal-log-" + orDefault(h, "local")
				}
				if _, err := tlog.GenerateKey(key, origin); err != nil {
					return exitWith(exitFailed, err)
				}
				made = true
			} else if cmd.String("origin") != "" {
				return usageErr("log init: --origin names a new key, but %q exists (its name is the origin)", key)
			}
			vkey, err := tlog.InitPOSIX(ctx, dir, key)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			if made {
				fmt.Printf("log key:      %s (made now; keep it private, log add signs with it)\n", key)
			} else {
				fmt.Printf("log key:      %s\n", key)
			}
			fmt.Printf("log:          %s (serve this directory as static files to publish it)\n", dir)
			fmt.Printf("verifier key: %s\n", vkey)
			fmt.Printf("              (also in %s.pub: give it to verifiers as --log-key and to witnesses)\n", key)
			return nil
		},
	}
}

func logAddCommand() *cli.Command {
	return &cli.Command{
		Name:        "add",
		Usage:       "anchor a run's heads in a log",
		Description: "Anchor a run's output dir OUT in the log DIR: append the statement's signed head and each checkpoint's, and write a receipt beside each (statement.log-receipt.json); run again to prove an anchored session anew against the newest (cosigned) checkpoint.",
		ArgsUsage:   "DIR OUT",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Usage: "the log's private note `LOGKEY` (default: the one log init recorded)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 2 {
				return usageErr("usage: layerseal log add DIR OUT")
			}
			return anchorSession(ctx, cmd.Args().Get(0), cmd.Args().Get(1), cmd.String("key"))
		},
	}
}

// anchorSession is log add, and run --log at the end of a run.
func anchorSession(ctx context.Context, dir, out, key string) error {
	ctx, cancel := context.WithTimeout(ctx, logTimeout)
	defer cancel()
	if _, err := tlog.Heads(out); err != nil {
		return exitWith(exitFailed, err)
	}
	l, err := tlog.Open(ctx, dir, tlog.Options{Key: key})
	if err != nil {
		return exitWith(exitFailed, err)
	}
	res, err := tlog.Anchor(ctx, l, out)
	if cerr := l.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return exitWith(exitFailed, err)
	}
	st := res[0] // the statement's head; then the checkpoints'
	what := "appended"
	if !st.Appended {
		what = "already in the log, proven anew"
	}
	fmt.Fprintf(os.Stderr, "layerseal: statement head: entry %d, %s; receipt %s against checkpoint %d with %d cosignature(s)\n",
		st.Index, what, st.Receipt, st.Size, st.Cosigned)
	if n := len(res) - 1; n > 0 {
		added := 0
		for _, r := range res[1:] {
			if r.Appended {
				added++
			}
		}
		fmt.Fprintf(os.Stderr, "layerseal: %d checkpoint head(s), %d appended now; a receipt beside each\n", n, added)
	}
	return nil
}

func logCheckCommand() *cli.Command {
	return &cli.Command{
		Name:        "check",
		Usage:       "monitor a log: check it from scratch",
		Description: "Monitor a log (a directory or an http(s):// URL): check its checkpoint, recompute the tree and every tile from its entries, require each entry to be a signed head, and count heads per key id; exit 1 when it does not check out.",
		ArgsUsage:   "DIR|URL",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-key", Usage: "the log's verifier key: `LOGPUB` file (from log init) or the key itself"},
			&cli.StringFlag{Name: "since", Usage: "a checkpoint `FILE` seen before (a receipt's, a witness state, a saved one): also check the log extends it"},
			&cli.StringFlag{Name: "save", Usage: "after a check that holds, write the checkpoint to `FILE` for the next --since"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 1 || cmd.String("log-key") == "" {
				return usageErr("usage: layerseal log check DIR|URL --log-key LOGPUB [--since FILE] [--save FILE]")
			}
			r, err := openLogReader(cmd.Args().First(), cmd.String("log-key"))
			if err != nil {
				return err
			}
			var since []byte
			if f := cmd.String("since"); f != "" {
				if since, err = os.ReadFile(f); err != nil {
					return exitWith(exitFailed, fmt.Errorf("--since: %w", err))
				}
				if rc, err := tlog.ParseReceipt(since); err == nil {
					since = rc.Checkpoint
				}
			}
			rep, err := tlog.Check(ctx, r, since)
			if err != nil {
				return exitWith(exitFailed, err)
			}
			cp := rep.Checkpoint
			fmt.Printf("log %s: size %d, root %x, signed by its key; tree and tiles recomputed from the entries agree\n", cp.Origin, cp.Size, cp.Hash)
			if rep.Since > 0 || since != nil {
				fmt.Printf("consistent with the earlier checkpoint of size %d\n", rep.Since)
			}
			for _, id := range rep.KeyIDs() {
				fmt.Printf("%d head(s) signed by key %s\n", rep.Heads[id], id)
			}
			if f := cmd.String("save"); f != "" {
				if err := os.WriteFile(f, cp.Note, 0o644); err != nil {
					return exitWith(exitFailed, err)
				}
			}
			return nil
		},
	}
}

// openLogReader opens a log for reading with its verifier key.
func openLogReader(loc, logKey string) (*tlog.Reader, error) {
	v, err := tlog.ParseVerifier(logKey)
	if err != nil {
		return nil, usageErr("--log-key: %v", err)
	}
	r, err := tlog.OpenReader(loc, v)
	if err != nil {
		return nil, exitWith(exitFailed, err)
	}
	return r, nil
}

// runLogDir is run's log: --log, or log: in the workspace's configuration
// (relative to the workspace); "" when neither. It must be a log now,
// before the agent runs.
func runLogDir(cmd *cli.Command) (string, error) {
	dir := cmd.String("log")
	if dir == "" {
		c, err := layerseal.LoadConfig(cmd.String("workspace"), cmd.String("config"))
		if err != nil || c == nil || c.Log == "" {
			return "", nil // a bad config was reported by runConfig
		}
		dir = c.Log
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cmd.String("workspace"), dir)
		}
	}
	if err := tlog.CheckPOSIX(dir, ""); err != nil {
		return "", usageErr("run: --log: %v", err)
	}
	return dir, nil
}

// anchorRun is run --log at the end of a run: a failure is reported and
// loses nothing, since log add anchors the output dir later.
func anchorRun(dir, out string) {
	start := time.Now()
	if err := anchorSession(context.Background(), dir, out, ""); err != nil {
		var ee *exitError
		if errors.As(err, &ee) && ee.err != nil {
			err = ee.err
		}
		fmt.Fprintf(os.Stderr, "layerseal: not anchored in the log: %s; the statement and the change set are kept: run `layerseal log add %s %s` later\n", printable(err.Error()), dir, out)
		return
	}
	fmt.Fprintf(os.Stderr, "layerseal: anchored in log %s in %d ms\n", dir, time.Since(start).Milliseconds())
}
