package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
)

// removePrunedCommand is what `apply` starts in the background: it removes
// what the state dir's pruning dir holds (an applied session's upper
// layer), so the user need not wait for that. Hidden: nothing else needs it,
// and `sessions --prune` finishes the same job.
func removePrunedCommand() *cli.Command {
	return &cli.Command{
		Name:        "remove-pruned",
		Usage:       "remove what the state dir's pruning dir holds",
		Description: "Remove what the state dir's pruning dir holds (apply runs it in the background).",
		Hidden:      true,
		Flags:       []cli.Flag{stateDirFlag()},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if cmd.NArg() != 0 {
				return usageErr("usage: layerseal remove-pruned [--state-dir DIR]")
			}
			if err := needRoot("remove-pruned"); err != nil {
				return err
			}
			if err := storeOf(cmd).RemovePruned(); err != nil {
				return exitWith(exitFailed, err)
			}
			return nil
		},
	}
}

// removeInBackground starts `layerseal remove-pruned` for the state dir
// dir in its own session, with no terminal and its output discarded, and
// does not wait for it: it goes on after this process exits, and an
// interrupt at the terminal does not reach it. It reports whether it
// started.
func removeInBackground(dir string) bool {
	c := exec.Command("/proc/self/exe", "remove-pruned", "--state-dir", dir)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c.Dir = "/" // holds no directory of the user's busy
	if err := c.Start(); err != nil {
		return false
	}
	c.Process.Release()
	return true
}

// removeLeftLayers removes the upper layer the apply of session id left
// in the state dir's pruning dir, if it left one, in the background, and
// says so and where; if it cannot start that, it removes it before
// returning.
func removeLeftLayers(store *layerseal.Store, id string) {
	dir := store.Retired(id)
	switch {
	case dir == "":
	case removeInBackground(store.Dir()):
		fmt.Fprintf(os.Stderr, "layerseal: the session's upper layer is being removed in the background from %s (if that stops, `layerseal sessions --prune` finishes it)\n", dir)
	default:
		if err := store.RemovePruned(); err != nil {
			fmt.Fprintf(os.Stderr, "layerseal: the session's upper layer could not be removed from %s (%v): `layerseal sessions --prune` removes it\n", dir, err)
		}
	}
}
