// Command layerseal runs an untrusted agent over a workspace in private
// mount and PID namespaces, with the workspace as an overlay, and writes a
// signed statement of exactly what the agent changed.
//
// Output rules: data goes to stdout, diagnostics to stderr prefixed with
// "layerseal: ". Exit codes: run exits with the agent's status (128+N when
// a signal N ended it), 125 when layerseal itself failed and 127 when the
// agent's command was not found; verify exits 0 (verified, complete), 2
// (verified, incomplete), 1 (not verified or malformed); every command
// exits 64 on a usage error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/nsrun"
)

// Exit codes.
const (
	exitOK         = 0
	exitFailed     = 1
	exitIncomplete = 2
	// exitOnBranch: verify --workspace of a session written to a git
	// branch (apply --git-branch) and not applied to the workspace.
	exitOnBranch = 3
	exitUsage    = 64
	exitSetup    = 125
	exitNotFound = 127
)

// exitError ends the process with code after printing msg (if any).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func exitWith(code int, err error) error { return &exitError{code, err} }

func usageErr(format string, args ...any) error {
	return exitWith(exitUsage, fmt.Errorf(format, args...))
}

func main() {
	nsrun.Init()
	os.Exit(runCLI(context.Background(), os.Args))
}

// newApp is layerseal's command line: its commands, flags and help.
func newApp() *cli.Command {
	app := &cli.Command{
		Name:    "layerseal",
		Usage:   "run an agent over an overlay of a workspace and attest what it changed",
		Version: versionText(),
		// `layerseal completion bash|zsh|fish|pwsh` prints a completion script.
		EnableShellCompletion: true,
		ConfigureShellCompletionCommand: func(c *cli.Command) {
			c.Hidden = false
			c.Usage = "print a shell completion script: bash, zsh, fish or pwsh"
		},
		Commands: []*cli.Command{
			keygenCommand(),
			runCommand(),
			verifyCommand(),
			proveCommand(),
			exportCommand(),
			showCommand(),
			applyCommand(),
			diffCommand(),
			discardCommand(),
			recoverCommand(),
			checkpointCommand(),
			sessionsCommand(),
			probeCommand(),
			rulesCommand(),
			logCommand(),
			witnessCommand(),
			removePrunedCommand(),
			manCommand(),
		},
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		OnUsageError: func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return exitWith(exitUsage, err)
		},
	}
	for _, c := range app.Commands {
		c.OnUsageError = app.OnUsageError
		if c.Name == "run" {
			// run ends with the line that says whose exit status it is.
			c.OnUsageError = func(_ context.Context, cmd *cli.Command, err error, _ bool) error {
				return runStatus(cmd, exitUsage, "layerseal", refusedLine, err, nil)
			}
		}
	}
	return app
}

// runCLI runs the command line args and returns the exit code.
func runCLI(ctx context.Context, args []string) int {
	err := newApp().Run(ctx, args)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors urfave/cli makes itself (unknown flag, missing value) are
		// usage errors.
		ee = &exitError{exitUsage, err}
	}
	if ee.err != nil {
		fmt.Fprintf(os.Stderr, "layerseal: %s\n", printable(ee.err.Error()))
	}
	return ee.code
}

// versionText is what --version prints: the version launch records carry,
// then the module version and VCS revision the binary was built from.
func versionText() string {
	v := layerseal.Version
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " (no build information)"
	}
	parts := []string{"module " + bi.Main.Version}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			parts = append(parts, "revision "+s.Value)
		case s.Key == "vcs.time":
			parts = append(parts, "committed "+s.Value)
		case s.Key == "vcs.modified" && s.Value == "true":
			parts = append(parts, "with uncommitted changes")
		}
	}
	if len(parts) == 1 {
		parts = append(parts, "no VCS revision recorded in the build")
	}
	return v + " (" + strings.Join(parts, ", ") + ")"
}
