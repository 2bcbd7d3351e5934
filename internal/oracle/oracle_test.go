package oracle_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/oracle"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/overlay"
)

// Environment knobs of the differential test.
const (
	envN    = "LAYERSEAL_ORACLE_N"    // sequences to run (default 500)
	envSeed = "LAYERSEAL_ORACLE_SEED" // first seed (default 1)
	envOps  = "LAYERSEAL_ORACLE_OPS"  // at most this many operations per sequence (default 16)
	envDisk = "LAYERSEAL_ORACLE_DISK" // "1": layers on the test's temp dir's filesystem, not tmpfs
)

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return n
}

// mountNS runs functions on one OS thread in a private mount namespace;
// the thread is never unlocked, so it dies with the goroutine.
type mountNS struct{ do chan func() }

func newMountNS(t *testing.T) *mountNS {
	ns := &mountNS{do: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range ns.do {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("private mount namespace: %v", err)
	}
	t.Cleanup(func() { close(ns.do) })
	return ns
}

func (ns *mountNS) run(f func() error) error {
	done := make(chan error)
	ns.do <- func() { done <- f() }
	return <-done
}

// scratch returns a directory for the layers: a fresh tmpfs (unmounted at
// cleanup) unless envDisk asks for the temp dir's own filesystem.
func scratch(t *testing.T) string {
	dir := t.TempDir()
	if os.Getenv(envDisk) == "1" {
		return dir
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=512m,mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount tmpfs: %v", err)
		}
	})
	// The trees hold user xattrs, which tmpfs takes only since Linux 6.6:
	// elsewhere the layers go on the temp dir's filesystem.
	if err := unix.Setxattr(dir, "user.oracle", []byte("y"), 0); errors.Is(err, unix.EOPNOTSUPP) {
		sub := filepath.Join(t.TempDir(), "disk")
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	return dir
}

// mountIDs tells whether this kernel reports statx mount IDs; without them
// every read is incomplete with NoMountID and nothing else.
var mountIDs = func() bool {
	st, err := linux.Lstat(unix.AT_FDCWD, "/")
	return err == nil && st.HasMountID
}()

// lab is one sequence's layers.
type lab struct{ lower, upper, work, merged string }

func newLab(base string, seed uint64) (lab, *rand.Rand, error) {
	d := filepath.Join(base, strconv.FormatUint(seed, 10))
	l := lab{filepath.Join(d, "lower"), filepath.Join(d, "upper"), filepath.Join(d, "work"), filepath.Join(d, "merged")}
	if err := os.RemoveAll(d); err != nil {
		return l, nil, err
	}
	for _, p := range []string{d, l.lower, l.upper, l.work, l.merged} {
		if err := os.Mkdir(p, 0o755); err != nil {
			return l, nil, err
		}
	}
	rng := oracle.Rand(seed)
	if err := oracle.Build(l.lower, rng); err != nil {
		return l, nil, err
	}
	// The merged root's metadata is the upper root's: start it as the
	// lower root's.
	var st unix.Stat_t
	if err := unix.Lstat(l.lower, &st); err != nil {
		return l, nil, err
	}
	err := errors.Join(unix.Chmod(l.upper, st.Mode&0o7777), unix.Lchown(l.upper, int(st.Uid), int(st.Gid)),
		unix.UtimesNanoAt(unix.AT_FDCWD, l.upper, []unix.Timespec{st.Mtim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW))
	return l, rng, err
}

// outcome of one sequence.
type outcome struct {
	ops      []oracle.Op
	problems []string
}

// sequence builds the tree of seed, then either generates up to maxOps
// operations (ops nil) or replays ops in the merged view of a real
// overlay, and checks Read against the full-tree diff and Apply against the
// merged view.
func sequence(ns *mountNS, base string, seed uint64, maxOps int, ops []oracle.Op) (outcome, error) {
	l, rng, err := newLab(base, seed)
	if err != nil {
		return outcome{}, fmt.Errorf("seed %d: %w", seed, err)
	}
	before, err := treediff.Walk(l.lower)
	if err != nil {
		return outcome{}, err
	}
	var after treediff.Manifest
	err = ns.run(func() error {
		// Mounted as layerseal mounts it: the pinned options the kernel
		// accepts.
		if _, err := overlay.NewMount(l.lower, l.upper, l.work, l.merged, false).Perform(); err != nil {
			return fmt.Errorf("mount overlay: %w", err)
		}
		var err error
		if ops == nil {
			ops, err = oracle.Generate(l.merged, rng, 1+rng.IntN(maxOps))
		} else {
			oracle.Replay(l.merged, ops)
		}
		if err == nil {
			after, err = treediff.Walk(l.merged)
		}
		return errors.Join(err, unix.Unmount(l.merged, 0))
	})
	if err != nil {
		return outcome{ops: ops}, err
	}
	out := outcome{ops: ops}
	ch, err := overlay.Read(l.upper, l.lower, overlay.ReadOptions{WorkDir: l.work})
	if err != nil {
		out.problems = append(out.problems, fmt.Sprintf("read: %v", err))
		return out, nil
	}
	for _, r := range ch.Incomplete {
		if r.Code == attest.NoMountID && !mountIDs {
			continue // the one reason a kernel without statx mount IDs must give
		}
		out.problems = append(out.problems, fmt.Sprintf("incomplete: %s %q: %s", r.Code, string(r.Path), r.Detail))
	}
	out.problems = append(out.problems, oracle.Compare(ch.Entries, treediff.Diff(before, after))...)
	if len(out.problems) > 0 {
		return out, nil
	}
	if err := overlay.Apply(l.upper, l.lower, ch.Entries, overlay.ApplyOptions{}); err != nil {
		out.problems = append(out.problems, fmt.Sprintf("apply: %v", err))
		return out, nil
	}
	// The differential check `verify --workspace` makes: the workspace
	// holds, path by path, the states the change list says were applied.
	if ms, err := checkApplied(l.lower, ch.Entries); err != nil {
		return out, err
	} else {
		for _, m := range ms {
			out.problems = append(out.problems, fmt.Sprintf("after apply %s: %s", m.Path, m.What))
		}
	}
	applied, err := treediff.Walk(l.lower)
	if err != nil {
		return out, err
	}
	changed := map[string]bool{}
	for _, e := range ch.Entries {
		changed[string(e.Path)] = true
	}
	if d := oracle.EqualApplied(after, applied, before, changed); d != "" {
		out.problems = append(out.problems, "after apply the workspace differs from the merged view: "+d)
	}
	return out, nil
}

// TestOracle runs LAYERSEAL_ORACLE_N seeded random sequences (500 by
// default, 50 with -short) and shrinks the first disagreement to a minimal reproducer.
func TestOracle(t *testing.T) {
	privtest.Require(t)
	sequences := 500
	if testing.Short() {
		sequences = 50 // the kernel matrix's emulated guests; CI's host run does 500
	}
	n, first, maxOps := envInt(t, envN, sequences), envInt(t, envSeed, 1), envInt(t, envOps, 16)
	if maxOps < 1 {
		t.Fatalf("%s must be at least 1", envOps)
	}
	base := scratch(t) // before the namespace, which must see it
	ns := newMountNS(t)
	start := time.Now()
	ran, opsRun := 0, 0
	for seed := uint64(first); seed < uint64(first+n); seed++ {
		out, err := sequence(ns, base, seed, maxOps, nil)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		ran++
		opsRun += len(out.ops)
		if len(out.problems) == 0 {
			os.RemoveAll(filepath.Join(base, strconv.FormatUint(seed, 10)))
			continue
		}
		min := oracle.Shrink(out.ops, func(ops []oracle.Op) bool {
			o, err := sequence(ns, base, seed, maxOps, ops)
			return err == nil && len(o.problems) > 0
		})
		again, _ := sequence(ns, base, seed, maxOps, min)
		t.Fatalf("seed %d disagrees after %d operations:\n\t%s\nshrunk to %d operations on the tree of seed %d:\n%s\nwhich gives:\n\t%s",
			seed, len(out.ops), strings.Join(out.problems, "\n\t"), len(min), seed, oracle.Literal(min), strings.Join(again.problems, "\n\t"))
	}
	t.Logf("%d sequences (seeds %d..%d), %d operations, all agree, in %v", ran, first, first+n-1, opsRun, time.Since(start).Round(time.Millisecond))
}

// TestOracleReproducers replays the shrunk disagreements the oracle found,
// each on the tree of its seed.
func TestOracleReproducers(t *testing.T) {
	privtest.Require(t)
	cases := []struct {
		name string
		seed uint64
		ops  []oracle.Op
	}{
		// Apply gave an unchanged lower file with other lower links an
		// inode of its own by writing a copy beside it, and left its
		// directory with a new mtime.
		{"link to a lower file with other links keeps its dir's mtime", 2192, []oracle.Op{
			{Kind: oracle.Hardlink, Path: "-ü\t3/n6/n7", Arg: "n1002"},
		}},
		// Copy-up splits a lower hard link in the merged view; nothing
		// changed, so nothing is listed and the workspace keeps the link.
		{"copy-up of a lower hard link without a change", 2, []oracle.Op{
			{Kind: oracle.OpenNoWrite, Path: "new\nline6/n14"},
		}},
	}
	base := scratch(t)
	ns := newMountNS(t)
	for _, c := range cases {
		out, err := sequence(ns, base, c.seed, 1, c.ops)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(out.problems) > 0 {
			t.Errorf("%s:\n\t%s", c.name, strings.Join(out.problems, "\n\t"))
		}
	}
}

func checkApplied(ws string, entries []attest.Entry) ([]overlay.Mismatch, error) {
	fd, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return overlay.Check(fd, entries)
}
