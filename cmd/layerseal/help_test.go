package main

import (
	"context"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestCommandSummaries: every command's summary fits on the line `--help`
// gives it (the details are its Description), and `completion` is listed.
func TestCommandSummaries(t *testing.T) {
	app := newApp()
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := prefix + c.Name
			if c.Usage == "" || len(c.Usage) > 72 || strings.ContainsAny(c.Usage, "\n") {
				t.Errorf("%s: summary of %d characters, want 1 to 72 on one line: %q", name, len(c.Usage), c.Usage)
			}
			walk(name+" ", c.Commands)
		}
	}
	walk("", app.Commands)
	var out strings.Builder
	app.Writer = &out
	if err := app.Run(context.Background(), []string{"layerseal", "--help"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "completion  print a shell completion script") {
		t.Errorf("--help does not list completion:\n%s", out.String())
	}
}
