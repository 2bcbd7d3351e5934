package main

import (
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
)

// stateDirFlag is the --state-dir flag every command that reads or keeps
// session state takes; LAYERSEAL_STATE_DIR sets it for a whole shell.
func stateDirFlag() cli.Flag {
	return &cli.StringFlag{Name: "state-dir", Value: layerseal.DefaultStateDir, Sources: cli.EnvVars("LAYERSEAL_STATE_DIR"),
		Usage: "`DIR` where sessions keep their upper layers and state (root only)"}
}

// sessionArgs is how a command line the CLI suggests names the session
// ref: see Store.CommandRef.
func sessionArgs(cmd *cli.Command, ref string) string {
	return storeOf(cmd).CommandRef(ref)
}

// storeOf is the state dir --state-dir names.
func storeOf(cmd *cli.Command) *layerseal.Store {
	return layerseal.OpenStore(cmd.String("state-dir"))
}

// needRoot refuses a command that reads or changes session state, which
// only root can reach, before it gives a misleading answer.
func needRoot(name string) error {
	if err := layerseal.RequireRoot(); err != nil {
		code := exitFailed
		if name == "run" {
			code = exitSetup
		}
		return exitWith(code, fmt.Errorf("layerseal %s needs root: sessions and their state dir belong to root (run it with sudo)", name))
	}
	return nil
}
