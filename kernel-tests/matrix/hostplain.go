package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// goTestSummary matches the line go test prints for each package it ran:
// "ok  	PKG	1.234s" or "FAIL	PKG	1.234s" (a build failure has no time).
var goTestSummary = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)(?:\s+([0-9.]+)s)?`)

// suiteName is the suite build.sh names after package pkg of module mod:
// the package's directory with / as -, "root" for the module's root.
func suiteName(mod, pkg string) (string, bool) {
	if pkg == mod {
		return "root", true
	}
	rel, ok := strings.CutPrefix(pkg, mod+"/")
	if !ok {
		return "", false
	}
	return strings.ReplaceAll(rel, "/", "-"), true
}

// hostPlainLog turns the output of go test (scripts/test's privileged run
// of the whole module, on the host kernel) into the "@@kt" lines of the
// host's plain pass: a suite line for each of suites, passed if go test
// printed "ok" for its package, failed otherwise (a suite go test did not
// report on failed too, exit 127), then the session test's report and a
// report "from go-test" that docs/KERNELS.md mentions. So the
// host runs each privileged suite once, not in go test and again here.
func hostPlainLog(goTest io.Reader, report []byte, mod string, suites []string) []byte {
	type outcome struct {
		pass bool
		secs int
	}
	got := map[string]outcome{}
	sc := bufio.NewScanner(goTest)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := goTestSummary.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name, ok := suiteName(mod, m[2])
		if !ok {
			continue
		}
		secs, _ := strconv.ParseFloat(m[3], 64)
		got[name] = outcome{pass: m[1] == "ok", secs: int(math.Round(secs))}
	}
	var b bytes.Buffer
	for _, s := range suites {
		o, ran := got[s]
		fmt.Fprintf(&b, "@@kt suite plain %s begin\n", s)
		switch {
		case !ran:
			fmt.Fprintf(&b, "go test printed no result for the suite %s\n", s)
			fmt.Fprintf(&b, "@@kt suite plain %s fail 127 0\n", s)
		case o.pass:
			fmt.Fprintf(&b, "@@kt suite plain %s pass 0 %d\n", s, o.secs)
		default:
			fmt.Fprintf(&b, "@@kt suite plain %s fail 1 %d\n", s, o.secs)
		}
	}
	fmt.Fprintln(&b, "@@kt report plain from go-test")
	sc = bufio.NewScanner(bytes.NewReader(report))
	for sc.Scan() {
		if key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), " "); ok {
			fmt.Fprintf(&b, "@@kt report plain %s %s\n", key, value)
		}
	}
	return b.Bytes()
}

// hostSuites are the suites the host's plain pass covers: cfg.suites, or
// every test binary build.sh made.
func hostSuites(cfg config, binDir string) ([]string, error) {
	if cfg.suites != "" {
		return strings.Split(cfg.suites, ","), nil
	}
	bins, err := filepath.Glob(filepath.Join(binDir, "tests", "*.test"))
	if err != nil {
		return nil, err
	}
	var s []string
	for _, b := range bins {
		s = append(s, strings.TrimSuffix(filepath.Base(b), ".test"))
	}
	slices.Sort(s)
	return s, nil
}

// readHostPlain reads the go test output at cfg.hostPlain and the session
// report beside it (the same name with .report, empty if go test wrote
// none) as the host's plain pass.
func readHostPlain(cfg config, binDir string) ([]byte, error) {
	out, err := os.ReadFile(cfg.hostPlain)
	if err != nil {
		return nil, fmt.Errorf("the host's plain pass: %w", err)
	}
	report, err := os.ReadFile(cfg.hostPlain + ".report")
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("the host's session report: %w", err)
	}
	suites, err := hostSuites(cfg, binDir)
	if err != nil {
		return nil, err
	}
	mod, err := modulePath()
	if err != nil {
		return nil, err
	}
	return hostPlainLog(bytes.NewReader(out), report, mod, suites), nil
}
