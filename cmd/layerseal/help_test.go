package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/policy"
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

// TestRunDefaults: the defaults run's help shows are the code's.
func TestRunDefaults(t *testing.T) {
	want := map[string]string{
		"time-budget":     layerseal.DefaultTimeBudget.String(),
		"max-entries":     fmt.Sprint(overlay.DefaultMaxEntries),
		"max-dir-entries": fmt.Sprint(overlay.DefaultMaxDirEntries),
		"digest-cap":      policy.FormatSize(overlay.DefaultDigestCap),
		"pids":            fmt.Sprint(nsrun.DefaultPidsMax),
		"network":         `"` + layerseal.NetworkNone + `"`, // a string flag's value is shown quoted
	}
	for _, f := range runCommand().Flags {
		name := f.Names()[0]
		w, ok := want[name]
		if !ok {
			continue
		}
		delete(want, name)
		doc := f.(cli.DocGenerationFlag)
		got := doc.GetDefaultText()
		if got == "" { // shown from the flag's value, quoted
			got = doc.GetValue()
		}
		if got != w {
			t.Errorf("run --%s: help says the default is %s, the code's is %s", name, got, w)
		}
	}
	for name := range want {
		t.Errorf("run has no flag --%s", name)
	}
}

// TestManPage: the manual page holds every visible command and flag, as
// --help does, and groff reads it without a warning.
func TestManPage(t *testing.T) {
	var b strings.Builder
	app := newApp()
	if err := writeMan(&b, app); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, c := range app.VisibleCommands() {
		if !strings.Contains(page, ".SS \""+c.Name) {
			t.Errorf("the manual page lacks the command %s", c.Name)
		}
		for _, f := range c.VisibleFlags() {
			if n := roff("--" + f.Names()[0]); !strings.Contains(page, ".B "+n) {
				t.Errorf("the manual page lacks %s %s", c.Name, n)
			}
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Logf("no groff here (%v): the page's roff is not checked", err)
		return
	}
	cmd := exec.Command(groff, "-Kutf8", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff warns of the manual page: %v\n%s", err, out)
	}
}
