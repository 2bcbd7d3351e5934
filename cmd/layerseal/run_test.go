package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/probe"
)

// detected is what the probe finds on the running kernel, tried once per
// test binary. The layerseal runs the tests start inherit the same kernel
// (and, under the kernel tests' statx filter, the same filter).
var detected = sync.OnceValues(probe.Detect)

// wantReasons returns the incompleteness codes every statement made on this
// kernel carries, by the probe's findings: no-mount-id (at the root) when
// statx reports no mount IDs, and sandbox when no cgroup v2 hierarchy is
// mounted (the agent gets no cgroup of its own); otherwise none.
func wantReasons(t *testing.T) []attest.Code {
	t.Helper()
	f, err := detected()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	var codes []attest.Code
	if v2, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2")); err == nil && len(v2) == 0 {
		codes = append(codes, attest.SandboxWeakened)
	}
	switch f.StatxMountID.Status {
	case probe.Yes:
		return codes
	case probe.No:
		return append(codes, attest.NoMountID)
	}
	t.Fatalf("probe could not decide statx mount IDs: %+v", f.StatxMountID)
	return nil
}

// wantVerifyExit is verify's exit code for an untouched statement of a run
// with nothing else incomplete: 0, or 2 when wantReasons names any.
func wantVerifyExit(t *testing.T) int {
	t.Helper()
	if len(wantReasons(t)) > 0 {
		return exitIncomplete
	}
	return exitOK
}

// checkReasons fails t unless the statement's incompleteness reasons are
// exactly extra plus wantReasons (at the root), each once.
func checkReasons(t *testing.T, got showChanges, extra ...string) {
	t.Helper()
	want := slices.Clone(extra)
	for _, c := range wantReasons(t) {
		want = append(want, string(c)+" ")
	}
	var have []string
	for _, r := range got.Incomplete {
		have = append(have, string(r.Code)+" "+string(r.Path))
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(have, want) || got.Complete != (len(want) == 0) {
		t.Errorf("statement complete=%v, incomplete %q; want %q", got.Complete, have, want)
	}
}

// env is one test's keys, workspace and output dirs.
type env struct {
	t        *testing.T
	dir      string
	ws       string
	key, pub string
	state    string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	e := &env{t: t, dir: dir, ws: filepath.Join(dir, "ws"), key: filepath.Join(dir, "seal.key"), state: filepath.Join(dir, "state")}
	e.pub = e.key + ".pub"
	if code, _, stderr := e.cli("keygen", "--out", e.key); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	if err := os.Mkdir(e.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	return e
}

// cli runs the test binary as layerseal and returns exit code, stdout and
// stderr.
func (e *env) cli(args ...string) (int, string, string) {
	e.t.Helper()
	return e.cliEnv(nil, args...)
}

func (e *env) cliEnv(extra []string, args ...string) (int, string, string) {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), cliEnv+"=1"), extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// run runs script as the agent over the workspace with output dir out.
func (e *env) run(out string, script string, extra ...string) (int, string) {
	e.t.Helper()
	args := append([]string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state}, extra...)
	args = append(args, "--", "/bin/sh", "-ec", script)
	code, stdout, stderr := e.cli(args...)
	return code, stdout + stderr
}

// write makes files from a map of path → content ("/" suffix: dir).
func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		var err error
		if strings.HasSuffix(p, "/") {
			err = os.MkdirAll(full, 0o755)
		} else {
			if err = os.MkdirAll(filepath.Dir(full), 0o755); err == nil {
				err = os.WriteFile(full, []byte(files[p]), 0o644)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Old, fixed times everywhere, so a copy-up that keeps times is told
	// apart from a change.
	old := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		ts := []unix.Timespec{unix.NsecToTimespec(old.UnixNano()), unix.NsecToTimespec(old.UnixNano())}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

var baseTree = map[string]string{
	"file.txt":   "hello\n",
	"same.txt":   "abcdef",
	"append.txt": "line1\n",
	"mode.txt":   "m",
	"owner.txt":  "o",
	"touch.txt":  "t",
	"xattr.txt":  "x",
	"del.txt":    "d",
	"open.txt":   "opened for writing, never written",
	"dir/a":      "a",
	"dir/b":      "b",
	"dir/sub/c":  "c",
	"redo/x":     "x",
	"redo/y":     "y",
	"mv.txt":     "moving",
	"mvdir/f1":   "1",
	"mvdir/f2":   "2",
	"target.txt": "link me",
	"deep/er/z":  "z",
	"empty/":     "",
}

// showChanges is the part of show --json the tests read.
type showChanges struct {
	Complete   bool `json:"complete"`
	Incomplete []struct {
		Code attest.Code `json:"code"`
		Path attest.Path `json:"path"`
	} `json:"incomplete"`
	Changes []struct {
		Path   attest.Path   `json:"path"`
		Change attest.Change `json:"change"`
	} `json:"changes"`
}

func (e *env) show(statement string) showChanges {
	e.t.Helper()
	code, stdout, stderr := e.cli("show", "--json", "--key", e.pub, statement)
	if code != 0 {
		e.t.Fatalf("show: exit %d: %s", code, stderr)
	}
	var s showChanges
	if err := json.Unmarshal([]byte(stdout), &s, json.RejectUnknownMembers(false)); err != nil {
		e.t.Fatalf("show --json: %v\n%s", err, stdout)
	}
	return s
}

// TestRunAgainstOracle runs one real agent per operation and checks the
// signed statement against an independent full-tree diff of the workspace
// before and the merged view the agent saw, then checks that after apply
// the workspace is exactly that merged view.
func TestRunAgainstOracle(t *testing.T) {
	privtest.Require(t)
	cases := []struct{ name, script string }{
		{"create", `echo new > new.txt; mkdir -p newdir/inner; echo n > newdir/inner/f`},
		{"modify", `echo changed > file.txt`},
		{"truncate-same-size", `printf 'ABCDEF' > same.txt`},
		{"append", `echo line2 >> append.txt`},
		{"chmod", `chmod 600 mode.txt`},
		{"chown", `chown 1234:4321 owner.txt`},
		{"touch", `touch -d '2024-05-06 07:08:09' touch.txt`},
		{"setxattr", `setfattr -n user.agent -v hi xattr.txt`},
		{"delete", `rm del.txt`},
		{"rm-rf-dir", `rm -rf dir`},
		{"rm-rf-recreate", `rm -rf redo; mkdir redo; echo again > redo/x`},
		{"rename-file", `mv mv.txt moved.txt`},
		{"rename-dir", `mv mvdir renamed`},
		{"hardlink", `ln target.txt hard.txt; ln newf.txt newlink 2>/dev/null || true; echo n > newf.txt; ln newf.txt newlink`},
		{"symlink", `ln -s target.txt sym; ln -s /etc/passwd abs`},
		{"mkfifo", `mkfifo fifo`},
		{"create-then-delete", `echo tmp > tmp.txt; rm tmp.txt; mkdir tmpd; rm -r tmpd`},
		{"open-no-write", `exec 3>>open.txt; exec 3>&-`},
		{"odd-names", `touch 'with space' "$(printf 'new\nline')" "$(printf 'bad\377utf8')"; mkdir "$(printf 'd\001ir')"`},
		{"deep-chmod", `chmod 700 deep/er`},
		{"typechange", `rm file.txt; mkdir file.txt; rm -r empty; echo now-a-file > empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			write(t, e.ws, baseTree)
			before, err := treediff.Walk(e.ws)
			if err != nil {
				t.Fatal(err)
			}
			// The manifest leaves the agent's view through a writable path.
			viewDir := filepath.Join(e.dir, "view")
			if err := os.Mkdir(viewDir, 0o755); err != nil {
				t.Fatal(err)
			}
			merged := filepath.Join(viewDir, "merged.manifest")
			script := c.script + fmt.Sprintf("\nLAYERSEAL_TEST_MANIFEST=1 %q . %q", os.Args[0], merged)
			out := filepath.Join(e.dir, "run")
			flags := append([]string{"--rw", viewDir}, testBinaryRO()...)
			if c.name == "chown" {
				// A file given to another user lets that user write it:
				// a (grants write) violation (see TestGrantsWrite),
				// allowed here, where apply must carry the owner.
				flags = append(flags, "--allow", "owner.txt")
			}
			if code, log := e.run(out, script, flags...); code != 0 {
				t.Fatalf("run: exit %d\n%s", code, log)
			}
			view, err := treediff.ReadFile(merged)
			if err != nil {
				t.Fatalf("the agent's manifest: %v", err)
			}
			statement := filepath.Join(out, "statement.json")
			if code, stdout, stderr := e.cli("verify", "--key", e.pub, "--launch", filepath.Join(out, "launch.json"), statement); code != wantVerifyExit(t) {
				t.Fatalf("verify: exit %d, want %d: %s%s", code, wantVerifyExit(t), stdout, stderr)
			}
			got := e.show(statement)
			compareWithOracle(t, got, treediff.Diff(before, view))
			after, err := treediff.Walk(e.ws)
			if err != nil {
				t.Fatal(err)
			}
			if d := treediff.Equal(view, after); d != "" {
				t.Errorf("after apply the workspace differs from the agent's view: %s", d)
			}
		})
	}
}

// compareWithOracle checks the statement's changes against the naive diff,
// and that it is incomplete for exactly the reasons of wantReasons. A
// replaced directory is one the naive diff sees as unchanged or with new
// metadata (its children are compared one by one in both).
func compareWithOracle(t *testing.T, got showChanges, want []treediff.Change) {
	t.Helper()
	checkReasons(t, got)
	g := map[string]string{}
	for _, c := range got.Changes {
		g[string(c.Path)] = string(c.Change)
	}
	w := map[string]string{}
	for _, c := range want {
		w[c.Path] = c.Change
	}
	for p, wc := range w {
		gc, ok := g[p]
		if gc == "replaced" && wc == "metadata" {
			continue
		}
		if !ok || gc != wc {
			t.Errorf("%q: statement says %q, full-tree diff says %q", p, gc, wc)
		}
	}
	for p, gc := range g {
		if _, ok := w[p]; !ok && gc != "replaced" {
			t.Errorf("%q: statement says %q, full-tree diff sees no change", p, gc)
		}
	}
	if t.Failed() {
		t.Logf("statement: %v", g)
		t.Logf("oracle:    %v", w)
	}
}
