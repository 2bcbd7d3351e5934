package kerneltests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/probe"
)

// Environment the matrix harness sets in guests.
const (
	// CLIEnv names a prebuilt layerseal binary; without it the test builds
	// one with the go command.
	CLIEnv = "LAYERSEAL_KT_CLI"
	// ReportEnv names a file the session test writes its findings to, one
	// "key value" line each, for the matrix.
	ReportEnv = "LAYERSEAL_KT_REPORT"
	// InjectFailureEnv=1 makes the suite fail (see TestMain): the
	// harness's proof that a failing test in a guest fails the matrix.
	InjectFailureEnv = "LAYERSEAL_KT_INJECT_FAILURE"
)

// TestMain fails the whole suite when InjectFailureEnv=1, before any test
// runs: the harness's proof that a failing suite in a guest fails the
// matrix.
func TestMain(m *testing.M) {
	if os.Getenv(InjectFailureEnv) == "1" {
		fmt.Fprintf(os.Stderr, "--- FAIL: failure injected with %s=1\nFAIL\n", InjectFailureEnv)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// cliPath returns the layerseal binary to test.
func cliPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(CLIEnv); p != "" {
		return p
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no layerseal binary: set %s or put the go command in PATH", CLIEnv)
	}
	bin := filepath.Join(t.TempDir(), "layerseal")
	cmd := exec.Command(goCmd, "build", "-o", bin, "../cmd/layerseal")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/layerseal: %v\n%s", err, out)
	}
	return bin
}

// layerseal runs the binary and returns its exit code, stdout and stderr.
func layerseal(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatalf("layerseal %q: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// TestSessionOnThisKernel runs one session end to end (probe, keygen, run,
// verify, show) and checks that what layerseal did follows what the probe
// found by trying: the overlay was mounted with exactly the pinned options
// the kernel accepted and the launch record lists the refused ones as
// missing; without statx mount IDs the statement is incomplete with the
// no-mount-id reason and verify exits 2, otherwise it is complete and
// verify exits 0. The change set must be right either way.
func TestSessionOnThisKernel(t *testing.T) {
	privtest.Require(t)
	bin := cliPath(t)
	dir := t.TempDir()

	code, stdout, stderr := layerseal(t, bin, "probe", "--json")
	if code != 0 {
		t.Fatalf("probe --json: exit %d: %s", code, stderr)
	}
	var feat probe.Features
	if err := json.Unmarshal([]byte(stdout), &feat); err != nil {
		t.Fatalf("probe --json: %v\n%s", err, stdout)
	}
	if !feat.OverlayPinned.OK() && !feat.Overlay.OK() {
		t.Fatalf("the kernel cannot mount overlay: %+v", feat.Overlay)
	}

	key := filepath.Join(dir, "seal.key")
	if code, _, stderr := layerseal(t, bin, "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	ws := filepath.Join(dir, "ws")
	for p, s := range map[string]string{"keep": "same\n", "edit": "old\n", "gone": "bye\n", "sub/inner": "in\n"} {
		p = filepath.Join(ws, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out")
	script := `echo new > edit; rm gone; mkdir made; echo x > made/f; cat keep > /dev/null`
	code, _, stderr = layerseal(t, bin, "run", "--workspace", ws, "--key", key, "--out", out,
		"--state-dir", filepath.Join(dir, "state"), "--", "/bin/sh", "-ec", script)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}

	statement, launchFile := filepath.Join(out, "statement.json"), filepath.Join(out, "launch.json")
	verifyCode, vout, verr := layerseal(t, bin, "verify", "--key", key+".pub", "--launch", launchFile, statement)
	wantVerify := 0
	if !feat.StatxMountID.OK() {
		wantVerify = 2
	}
	if verifyCode != wantVerify {
		t.Errorf("verify: exit %d, want %d (statx mount IDs: %s)\n%s%s", verifyCode, wantVerify, feat.StatxMountID.Status, vout, verr)
	}

	code, stdout, stderr = layerseal(t, bin, "show", "--json", "--key", key+".pub", statement)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	var shown struct {
		Complete   bool `json:"complete"`
		Incomplete []struct {
			Code attest.Code `json:"code"`
		} `json:"incomplete"`
		Changes []struct {
			Path   attest.Path   `json:"path"`
			Change attest.Change `json:"change"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil {
		t.Fatalf("show --json: %v\n%s", err, stdout)
	}
	var codes []string
	for _, r := range shown.Incomplete {
		codes = append(codes, string(r.Code))
	}
	wantCodes := []string(nil)
	if !feat.StatxMountID.OK() {
		wantCodes = []string{string(attest.NoMountID)}
	}
	if !slices.Equal(codes, wantCodes) || shown.Complete != (wantCodes == nil) {
		t.Errorf("statement complete=%v, reasons %q; want reasons %q", shown.Complete, codes, wantCodes)
	}
	var changes []string
	for _, c := range shown.Changes {
		changes = append(changes, string(c.Change)+" "+string(c.Path))
	}
	slices.Sort(changes)
	// The root changes too: entries were added to and removed from it.
	wantChanges := []string{"added made", "added made/f", "deleted gone", "metadata .", "modified edit"}
	if !slices.Equal(changes, wantChanges) {
		t.Errorf("changes %q, want %q", changes, wantChanges)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "edit")); err != nil || string(b) != "new\n" {
		t.Errorf("after apply, edit holds %q (%v)", b, err)
	}

	launch := readLaunch(t, launchFile, key+".pub")
	checkOverlayOptions(t, feat, launch.Overlay)

	if p := os.Getenv(ReportEnv); p != "" {
		report := fmt.Sprintf("overlay-options %s\noverlay-missing %s\nverify-exit %d\nincomplete %s\n",
			listOrNone(launch.Overlay.Options), listOrNone(launch.Overlay.Missing), verifyCode, listOrNone(codes))
		if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ",")
}

func readLaunch(t *testing.T, path, pubPath string) *attest.LaunchRecord {
	t.Helper()
	pub, err := attest.LoadPublicKey(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := attest.VerifyLaunch(env, pub)
	if err != nil {
		t.Fatalf("launch record: %v", err)
	}
	return l
}

// checkOverlayOptions: every pinned option the probe's trial mount accepted
// was used, every one it refused is listed as missing, and nothing else.
func checkOverlayOptions(t *testing.T, feat probe.Features, got attest.OverlayOptions) {
	t.Helper()
	var wantUsed, wantMissing []string
	for _, o := range probe.PinnedOverlayOptions {
		switch f := feat.Option(o); f.Status {
		case probe.Yes:
			wantUsed = append(wantUsed, o)
		case probe.No:
			wantMissing = append(wantMissing, o)
		default:
			t.Errorf("probe could not try overlay option %q: %+v", o, f)
		}
	}
	if !slices.Equal(got.Options, wantUsed) || !slices.Equal(got.Missing, wantMissing) {
		t.Errorf("launch record: overlay options %q, missing %q; the probe's trial mounts accepted %q and refused %q",
			got.Options, got.Missing, wantUsed, wantMissing)
	}
}
