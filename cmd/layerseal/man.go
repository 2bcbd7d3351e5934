package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
)

// manCommand prints layerseal's manual page, made from the same command
// and flag definitions as --help.
func manCommand() *cli.Command {
	return &cli.Command{
		Name:        "man",
		Usage:       "print the manual page (roff): layerseal man > layerseal.1",
		Description: "Print layerseal's manual page in roff, made from the same definitions as --help: `layerseal man | man -l -` reads it.",
		Action: func(context.Context, *cli.Command) error {
			return writeMan(os.Stdout, newApp())
		},
	}
}

// writeMan writes app's manual page in roff (man(7)): its name, synopsis,
// every visible command with its usage, description and flags.
func writeMan(w io.Writer, app *cli.Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, ".TH LAYERSEAL 1 \"\" \"layerseal %s\" \"User Commands\"\n", layerseal.Version)
	fmt.Fprintf(&b, ".SH NAME\nlayerseal \\- %s\n", roff(app.Usage))
	b.WriteString(".SH SYNOPSIS\n.B layerseal\n.I command\n[options] [arguments]\n")
	b.WriteString(".SH COMMANDS\n")
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			name := prefix + c.Name
			fmt.Fprintf(&b, ".SS \"%s\"\n", roff(strings.TrimSpace(name+" "+c.ArgsUsage)))
			fmt.Fprintf(&b, "%s\n", roff(c.Usage))
			if c.Description != "" {
				fmt.Fprintf(&b, ".PP\n%s\n", roff(c.Description))
			}
			for _, f := range c.VisibleFlags() {
				term, desc, _ := strings.Cut(f.String(), "\t")
				fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roff(term), roff(desc))
			}
			walk(name+" ", c.Commands)
		}
	}
	walk("", app.Commands)
	b.WriteString(".SH EXIT STATUS\n0 success (verify: complete), 1 failed or not verified, 2 verified but incomplete, " +
		"3 verify --workspace of a session written to a git branch, 64 a command line refused, 125 run failed before the agent started, " +
		"127 the agent's command not found; run otherwise exits with the agent's status.\n")
	b.WriteString(".SH SEE ALSO\nThe README and docs/ of layerseal's source.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// roff escapes text for a roff line: backslashes, and a leading dot or
// quote that would be read as a request; each newline starts a new line,
// escaped the same way.
func roff(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, `\`, `\e`), "\n")
	for i, l := range lines {
		l = strings.ReplaceAll(l, "-", `\-`)
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}
