package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/probe"
)

// upperFiller is an agent that writes 1 MiB to "first", then up to
// 256 MiB more to "big" as fast as it can (exec'd, so no process of it
// outlives the main one): far past the limits the tests set, but bounded,
// so a watcher that fails to stop it cannot fill the disk.
const upperFiller = `head -c 1048576 /dev/zero > first; exec dd if=/dev/zero of=big bs=65536 count=4096 2>/dev/null`

// TestMaxUpperStopsAgent: an agent writing past --max-upper is stopped; the
// statement, verified, is incomplete with the reason naming the limit and
// holds what the agent wrote before the stop; the change set is staged
// although layerseal.yaml says apply: always; the launch record holds the
// limit (the flag's, over the file's) and the reserve.
func TestMaxUpperStopsAgent(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{"layerseal.yaml": "apply: always\nmax_upper: 1GiB\n"})
	out := filepath.Join(e.dir, "out")
	code, log := e.run(out, upperFiller, "--max-upper", "8MiB")
	if code != 128+int(unix.SIGKILL) {
		t.Fatalf("run: exit %d, want %d (the agent killed)\n%s", code, 128+int(unix.SIGKILL), log)
	}
	for _, want := range []string{
		"the agent's upper layer reached its limit: stopping the agent",
		"incomplete: upper-limit: the agent was stopped when its upper layer took ",
		"over the limit of 8 MiB (max_upper)",
		"the agent was stopped at a limit of its upper layer (see the incomplete reasons): what it wrote is kept in " + e.state,
		"staged, not applied: `layerseal diff",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("run's output lacks %q:\n%s", want, log)
		}
	}
	e.wantIncomplete(out, string(attest.UpperLimit), "")

	b, _ := os.ReadFile(filepath.Join(out, "statement.json"))
	launch, _ := os.ReadFile(filepath.Join(out, "launch.json"))
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.VerifyStatement(b, pub, launch)
	if err != nil {
		t.Fatalf("statement: %v", err)
	}
	lr, err := attest.VerifyLaunch(launch, pub)
	if err != nil {
		t.Fatalf("launch record: %v", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(e.state, &fs); err != nil {
		t.Fatal(err)
	}
	if reserve := int64(fs.Blocks) * fs.Frsize / 100 * 5; lr.Policy.MaxUpper != 8<<20 || lr.Policy.MinFree != reserve {
		t.Errorf("launch record: max upper %d, min free %d; want %d and the default reserve %d", lr.Policy.MaxUpper, lr.Policy.MinFree, 8<<20, reserve)
	}
	if c, stdout, stderr := e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json")); c != 0 ||
		!strings.Contains(stdout, fmt.Sprintf("upper layer: at most 8388608 bytes on disk; %d bytes kept free on the state dir's filesystem\n", lr.Policy.MinFree)) {
		t.Errorf("show of the launch record: exit %d, no upper layer's limits\n%s%s", c, stdout, stderr)
	}
	zeros := sha256.Sum256(make([]byte, 1<<20))
	var first, big *attest.Entry
	for i, en := range st.Entries {
		switch en.Path {
		case "first":
			first = &st.Entries[i]
		case "big":
			big = &st.Entries[i]
		}
	}
	if first == nil || first.New == nil || first.New.Size != 1<<20 || string(first.New.SHA256) != string(zeros[:]) {
		t.Errorf("the statement does not hold first, written before the stop: %+v", first)
	}
	if big == nil || big.New == nil || big.New.Size >= 256<<20 {
		t.Errorf("big is missing or was written whole (not stopped): %+v", big)
	}
	if st.Exit.Signal != "SIGKILL" {
		t.Errorf("exit %+v, want SIGKILL", st.Exit)
	}

	if _, err := os.Lstat(filepath.Join(e.ws, "first")); err == nil {
		t.Error("first was applied to the workspace")
	}
	uppers, _ := filepath.Glob(filepath.Join(e.state, "sessions", st.SessionID, "upper"))
	if len(uppers) != 1 {
		t.Fatalf("the session's upper layer is not kept in the state dir")
	}
	u, err := probe.DiskUsage(uppers[0])
	if err != nil {
		t.Fatal(err)
	}
	if u.Bytes <= 8<<20 {
		t.Errorf("the upper layer takes %d bytes, not past the limit it was stopped at", u.Bytes)
	}
	t.Logf("stopped with %d bytes in the upper layer (limit %d, overshoot %d)", u.Bytes, 8<<20, u.Bytes-8<<20)
	if c, _, stderr := e.cli("apply", "--state-dir", e.state, out); c != 0 {
		t.Errorf("apply of the staged change set: exit %d\n%s", c, stderr)
	} else if b, err := os.ReadFile(filepath.Join(e.ws, "first")); err != nil || len(b) != 1<<20 {
		t.Errorf("first after apply: %d bytes, %v", len(b), err)
	}
}

// TestUpperReserve: with the state dir on a 128 MiB filesystem of its own,
// --min-free 96MiB stops an agent that would fill it, before it does; a
// reserve larger than the free space refuses the run before anything
// starts, naming it.
func TestUpperReserve(t *testing.T) {
	e := newEnv(t)
	if err := os.Mkdir(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", e.state, "tmpfs", 0, "size=128m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs state dir: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(e.state, unix.MNT_DETACH) })

	out := filepath.Join(e.dir, "out")
	code, log := e.run(out, upperFiller, "--min-free", "96MiB")
	if code != 128+int(unix.SIGKILL) {
		t.Fatalf("run: exit %d, want %d (the agent killed)\n%s", code, 128+int(unix.SIGKILL), log)
	}
	if !strings.Contains(log, "incomplete: upper-limit: the agent was stopped when the state dir's filesystem had ") ||
		!strings.Contains(log, "under the reserve of 96 MiB kept free there") {
		t.Errorf("run's output does not name the reserve:\n%s", log)
	}
	e.wantIncomplete(out, string(attest.UpperLimit), "")
	var fs unix.Statfs_t
	if err := unix.Statfs(e.state, &fs); err != nil {
		t.Fatal(err)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < 64<<20 {
		t.Errorf("the state dir's filesystem has %d bytes free: the agent was not stopped near the reserve", free)
	}

	out2 := filepath.Join(e.dir, "out2")
	code, log = e.run(out2, "echo never > ran", "--min-free", "1TiB")
	if code != exitSetup || !strings.Contains(log, "less than the reserve of 1 TiB (the policy's min_free)") ||
		!strings.Contains(log, "a smaller --min-free") {
		t.Errorf("run under the reserve: exit %d, want %d naming the reserve\n%s", code, exitSetup, log)
	}
	if _, err := os.Lstat(filepath.Join(out2, "launch.json")); err == nil {
		t.Error("a run refused for its reserve wrote a launch record")
	}

	out3 := filepath.Join(e.dir, "out3")
	if code, log = e.run(out3, "echo x > y", "--min-free", "0", "--max-upper", "1TiB"); code != 0 {
		t.Fatalf("run with --min-free 0: exit %d\n%s", code, log)
	}
	if lr := e.launchRecord(out3); lr.Policy.MinFree != 0 || lr.Policy.MaxUpper != 1<<40 {
		t.Errorf("--min-free 0 --max-upper 1TiB: launch record's min free %d, max upper %d; want no reserve and 1 TiB", lr.Policy.MinFree, lr.Policy.MaxUpper)
	}
}

// TestUpperLimitFlagsRefused: a --max-upper or --min-free that is not a
// positive size is a usage error naming the flag and the value.
func TestUpperLimitFlagsRefused(t *testing.T) {
	e := &env{t: t, dir: t.TempDir()}
	for _, c := range [][]string{{"--max-upper", "0"}, {"--max-upper", "lots"}, {"--min-free", "-1GiB"}, {"--max-upper", "8 MiBs"}} {
		args := append([]string{"run", "--workspace", e.dir, "--key", "k", "--out", filepath.Join(e.dir, "o")}, c...)
		code, _, stderr := e.cli(append(args, "--", "true")...)
		if want := c[0] + " \"" + c[1] + "\": want a size"; code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%q: exit %d, want %d with %q\n%s", c, code, exitUsage, want, stderr)
		}
	}
}
