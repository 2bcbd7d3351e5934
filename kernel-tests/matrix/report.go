package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/layerseal/layerseal/probe"
)

// rows returns the "MODE NAME" cells of all columns, plain ones first.
func rows(cols []*Column) []string {
	set := map[string]bool{}
	for _, c := range cols {
		for k := range c.Cells {
			set[k] = true
		}
	}
	r := slices.Collect(maps.Keys(set))
	slices.SortFunc(r, func(a, b string) int {
		ma, _, _ := strings.Cut(a, " ")
		mb, _, _ := strings.Cut(b, " ")
		if ma != mb {
			if ma == "plain" {
				return -1
			}
			if mb == "plain" {
				return 1
			}
		}
		return strings.Compare(a, b)
	})
	return r
}

func rowLabel(r string) string {
	mode, name, _ := strings.Cut(r, " ")
	if mode == "plain" {
		return name
	}
	return name + " (" + mode + ")"
}

func cellText(c *Column, r string) string {
	cell, ok := c.Cells[r]
	switch {
	case !ok:
		return "-"
	case cell.Pass:
		return fmt.Sprintf("pass %ds", cell.Seconds)
	case cell.Exit == -1:
		return "died"
	}
	return fmt.Sprintf("FAIL(%d)", cell.Exit)
}

// featureRows are the probe findings shown, by label.
var featureRows = []struct {
	label string
	get   func(probe.Features) probe.Finding
}{
	{"statx STATX_MNT_ID", func(f probe.Features) probe.Finding { return f.StatxMountID }},
	{"statx STATX_MNT_ID_UNIQUE", func(f probe.Features) probe.Finding { return f.StatxMountIDUnique }},
	{"openat2", func(f probe.Features) probe.Finding { return f.Openat2 }},
	{"overlay", func(f probe.Features) probe.Finding { return f.Overlay }},
	{"overlay userxattr", func(f probe.Features) probe.Finding { return f.UserXattr }},
	{"overlay pinned set", func(f probe.Features) probe.Finding { return f.OverlayPinned }},
	{"landlock scopes", func(f probe.Features) probe.Finding { return f.LandlockScope }},
}

func featureText(c *Column, mode string, get func(probe.Features) probe.Finding) string {
	f, ok := c.Features[mode]
	if !ok {
		return unknown(c, mode)
	}
	return string(get(f).Status)
}

// unknown is what a cell of mode says that the column has no finding
// for: "-" when no suite ran in that mode there (the nostatx suites on
// newer kernels), "?" when they ran and the finding is missing.
func unknown(c *Column, mode string) string {
	for k := range c.Cells {
		if strings.HasPrefix(k, mode+" ") {
			return "?"
		}
	}
	return "-"
}

// lines builds the table: a header, the suites, the features, and what
// the session test saw layerseal do.
func lines(cols []*Column) [][]string {
	head := []string{"", "kernel"}
	for _, c := range cols {
		rel := c.Release
		if rel == "" {
			rel = "?"
		}
		head = append(head, c.Name+" ("+rel+")")
	}
	out := [][]string{head}
	add := func(section, label string, val func(*Column) string) {
		row := []string{section, label}
		for _, c := range cols {
			row = append(row, val(c))
		}
		out = append(out, row)
	}
	for _, r := range rows(cols) {
		add("suite", rowLabel(r), func(c *Column) string { return cellText(c, r) })
	}
	// Tests guest.sh does not run under nostatx, by suite.
	add("suite", "left out under nostatx", func(c *Column) string {
		if v, ok := c.Reports["nostatx"]["left-out"]; ok {
			return v
		}
		return "-"
	})
	// Tests guest.sh runs in no guest and in no pass without statx:
	// scripts/test's go test runs them on the host.
	add("suite", "not run: kernel-independent", func(c *Column) string {
		v, plain := c.Reports["plain"]["kernel-independent"]
		if !plain {
			v = c.Reports["nostatx"]["kernel-independent"]
		}
		switch _, nostatx := c.Reports["nostatx"]["kernel-independent"]; {
		case v == "":
			return "-"
		case !plain:
			return v + " (nostatx pass only)"
		case !nostatx:
			return v + " (plain pass only)"
		}
		return v
	})
	add("guest", "end marker", func(c *Column) string {
		if c.Ended {
			return "seen"
		}
		return "MISSING"
	})
	for _, fr := range featureRows {
		add("probe", fr.label, func(c *Column) string { return featureText(c, "plain", fr.get) })
	}
	for _, o := range probe.PinnedOverlayOptions {
		add("probe", "overlay "+o, func(c *Column) string {
			return featureText(c, "plain", func(f probe.Features) probe.Finding { return f.Option(o) })
		})
	}
	add("probe", "statx STATX_MNT_ID under nostatx", func(c *Column) string {
		return featureText(c, "nostatx", func(f probe.Features) probe.Finding { return f.StatxMountID })
	})
	report := func(mode, key string) func(*Column) string {
		return func(c *Column) string {
			if v, ok := c.Reports[mode][key]; ok {
				return v
			}
			return unknown(c, mode)
		}
	}
	add("session", "overlay options dropped", report("plain", "overlay-missing"))
	add("session", "verify exit", report("plain", "verify-exit"))
	add("session", "incomplete", report("plain", "incomplete"))
	add("session", "verify exit (nostatx)", report("nostatx", "verify-exit"))
	add("session", "incomplete (nostatx)", report("nostatx", "incomplete"))
	return out
}

// writeText prints the matrix as aligned columns.
func writeText(w io.Writer, cols []*Column) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range lines(cols) {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	tw.Flush()
}

// writeFailure prints why a column failed and the tail of its log.
func writeFailure(w io.Writer, c *Column) {
	fmt.Fprintf(w, "\n== %s (%s) failed ==\n", c.Name, c.Release)
	for _, r := range rows([]*Column{c}) {
		if !c.Cells[r].Pass {
			fmt.Fprintf(w, "suite %s: %s\n", rowLabel(r), cellText(c, r))
		}
	}
	for _, p := range c.Problems {
		fmt.Fprintln(w, p)
	}
	if len(c.Tail) > 0 {
		fmt.Fprintf(w, "-- last %d lines of the log --\n", len(c.Tail))
		for _, l := range c.Tail {
			fmt.Fprintln(w, "  "+l)
		}
	}
}

// writeMarkdown prints docs/KERNELS.md: what layerseal does on each kernel,
// then the matrix.
func writeMarkdown(w io.Writer, cols []*Column) {
	fmt.Fprint(w, markdownHead)
	for _, c := range cols {
		if c.Reports["plain"]["from"] == "go-test" {
			fmt.Fprintf(w, "The %s column's plain rows are the results of scripts/test's own run of\n"+
				"`go test ./...` as root on that kernel, in full (without `-test.short`).\n\n", c.Name)
		}
	}
	ls := lines(cols)
	fmt.Fprintln(w, "| "+strings.Join(ls[0][1:], " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Repeat(" --- |", len(ls[0])-1))
	section := ""
	for _, l := range ls[1:] {
		if l[0] != section {
			section = l[0]
			fmt.Fprintf(w, "| **%s** |%s\n", section, strings.Repeat("  |", len(l)-2))
		}
		cells := make([]string, 0, len(l)-1)
		for _, v := range l[1:] {
			cells = append(cells, strings.ReplaceAll(v, "|", "\\|"))
		}
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
	fmt.Fprint(w, markdownTail)
}

const markdownHead = `# Kernels

This file is generated: ` + "`kernel-tests/run --markdown > docs/KERNELS.md`" + `
(as root). Edit the text in kernel-tests/matrix/report.go, not here.

layerseal never decides anything from the kernel's version number: each
feature below was found by trying it (` + "`layerseal probe`" + `), and what
layerseal does follows from what was found.

| feature | kernel that added it | when missing, layerseal |
| --- | --- | --- |
| statx mount IDs (STATX_MNT_ID) | 5.8 | tells mounts apart by st_dev only; every statement is incomplete with reason ` + "`no-mount-id`" + ` and ` + "`verify`" + ` exits 2 |
| statx unique mount IDs | 6.8 | uses the reusable 32-bit mount ID; recorded in the launch record |
| openat2 RESOLVE_BENEATH et al. | 5.6 | walks one component at a time with O_NOFOLLOW, refusing .. and mount crossings |
| statx itself | 4.11 | falls back to fstatat, without mount IDs (as above) |
| overlay ` + "`uuid=null`" + ` | 6.6 | mounts without it; the launch record lists it under missing options |
| overlay ` + "`xino=off`" + `, ` + "`nfs_export=off`" + ` | 4.17, 4.16 | mounts without them; listed as missing |
| overlay ` + "`redirect_dir`" + `, ` + "`metacopy`" + `, ` + "`index`" + ` | 4.10–4.19 | refuses to run: without them the upper layer is not the complete change set |
| overlay ` + "`userxattr`" + ` | 5.11 | only used for unprivileged mounts |
| Landlock scopes (ABI 6), Landlock in the LSM list | 6.12 | runs the agent unscoped: sharing the host's network, it can connect to the host's abstract unix sockets; the launch record has no ` + "`scoped`" + ` (not an incomplete reason) |

## Matrix

Rows are test suites (packages) run as root with ` + "`LAYERSEAL_PRIVILEGED=1`" + ` and
` + "`-test.short`" + `; "(nostatx)" rows ran again under a seccomp filter that makes statx
fail with ENOSYS, as on kernels before 4.11, on the host and the oldest kernel
only (` + "`kernel-tests/run -nostatx all`" + ` runs them everywhere). The tests in
the row "not run: kernel-independent" (signature algorithms and formats,
proofs, the transparency log, printed reports) run on the host only, in
scripts/test's ` + "`go test ./...`" + `. The probe rows are the guest's own findings; the session rows are what an end-to-end session
(kernel-tests/session_test.go) saw: the pinned overlay options the kernel
refused (and the launch record lists as missing), verify's exit code and the
statement's incompleteness reasons.

`

const markdownTail = `
Kernels older than 5.8 cannot be booted here; the nostatx rows stand in for
them, and the Vagrantfile at the repository root boots Ubuntu 20.04 (5.4) and
Debian 11 and 12 on a workstation with the same guest script.
`
