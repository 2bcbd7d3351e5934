package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/oracle"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/probe"
)

// TestReadChangedMatchesReadPrivileged applies seeded random operations to
// a real overlay in rounds and, after each, reads the upper layer both
// incrementally (ReadChanged over the probe's changed paths and the
// previous round's result) and from scratch (Read): entries, reasons and
// excluded summaries must be identical.
func TestReadChangedMatchesReadPrivileged(t *testing.T) {
	privtest.Require(t)
	f := kernelFeatures(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			base := t.TempDir()
			lower, upper, work, merged := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
			for _, d := range []string{lower, upper, work, merged} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			rng := oracle.Rand(seed)
			if err := oracle.Build(lower, rng); err != nil {
				t.Fatal(err)
			}
			// Excluded subtrees are taken over too.
			opt := ReadOptions{Exclude: func(p attest.Path) bool { return strings.HasSuffix(string(p), "x") }}
			inMountNS(t, func() error {
				if _, err := performPinned(f, lower, upper, work, merged); err != nil {
					return err
				}
				prev, err := Read(upper, lower, opt)
				if err != nil {
					return err
				}
				prevIdx, err := probe.Scan(upper, probe.ScanOptions{})
				if err != nil {
					return err
				}
				reused := 0
				for round := range 12 {
					// Let earlier rounds' entries leave the racy window (a
					// racy entry is always read again), so that what a
					// round leaves alone can be taken over whatever the
					// machine's speed.
					time.Sleep(2 * probe.RacyWindow())
					if _, err := oracle.Generate(merged, rng, 1+rng.IntN(6)); err != nil {
						return err
					}
					idx, err := probe.Scan(upper, probe.ScanOptions{})
					if err != nil {
						return err
					}
					changed, err := idx.Changed(prevIdx)
					if err != nil {
						return err
					}
					got, err := ReadChanged(upper, lower, prev, func(p attest.Path) bool { return probe.Touches(changed, string(p)) }, opt)
					if err != nil {
						return err
					}
					want, err := Read(upper, lower, opt)
					if err != nil {
						return err
					}
					if d := diffChanges(got, want); d != "" {
						return fmt.Errorf("round %d (changed %q): incremental read differs from a fresh one:\n%s", round, changed, d)
					}
					if got.Stats.UpperEntries < want.Stats.UpperEntries {
						reused++
					}
					prev, prevIdx = got, idx
				}
				if reused == 0 {
					return fmt.Errorf("no round took anything from the previous read")
				}
				return nil
			})
		})
	}
}

func diffChanges(got, want *Changes) string {
	var b strings.Builder
	g, w := map[attest.Path]attest.Entry{}, map[attest.Path]attest.Entry{}
	for _, e := range got.Entries {
		g[e.Path] = e
	}
	for _, e := range want.Entries {
		w[e.Path] = e
	}
	if len(g) != len(got.Entries) {
		fmt.Fprintf(&b, "incremental read lists a path twice\n")
	}
	for p, e := range w {
		if ge, ok := g[p]; !ok || !reflect.DeepEqual(ge, e) {
			fmt.Fprintf(&b, "%q: got %+v %+v %+v, want %+v %+v %+v\n", p, ge.Change, ge.Old, ge.New, e.Change, e.Old, e.New)
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			fmt.Fprintf(&b, "%q: listed only by the incremental read\n", p)
		}
	}
	if b.Len() == 0 && !reflect.DeepEqual(got.Entries, want.Entries) {
		fmt.Fprintf(&b, "entries in another order\n")
	}
	key := func(r attest.Reason) string { return string(r.Path) + "\x00" + string(r.Code) + "\x00" + r.Detail }
	gr, wr := slices.Sorted(mapIter(got.Incomplete, key)), slices.Sorted(mapIter(want.Incomplete, key))
	if !slices.Equal(gr, wr) {
		fmt.Fprintf(&b, "reasons %q, want %q\n", gr, wr)
	}
	if !reflect.DeepEqual(got.Excluded, want.Excluded) {
		fmt.Fprintf(&b, "excluded %+v, want %+v\n", got.Excluded, want.Excluded)
	}
	return b.String()
}

func mapIter[T any](xs []T, f func(T) string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, x := range xs {
			if !yield(f(x)) {
				return
			}
		}
	}
}

// TestReadChangedContextPrivileged: a directory that becomes opaque keeps
// its children's stat, but a subdirectory beneath it now hides its lower
// children; ReadChanged must not take that subdirectory from before.
func TestReadChangedContextPrivileged(t *testing.T) {
	privtest.Require(t)
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	for _, d := range []string{"lower/d/s", "upper/d/s"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "d/s/k"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "d", "d/s"} {
		st, err := os.Stat(filepath.Join(lower, p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(upper, p), st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	prev, err := Read(upper, lower, ReadOptions{})
	if err != nil || len(prev.Entries) != 0 {
		t.Fatalf("before: %+v, %v", prev, err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "d"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	dirty := func(p attest.Path) bool { return p == attest.Root || p == "d" }
	got, err := ReadChanged(upper, lower, prev, dirty, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := Read(upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(want.Entries, func(e attest.Entry) bool { return e.Path == "d/s/k" && e.Change == attest.Deleted }) {
		t.Fatalf("fresh read: %+v", want.Entries)
	}
	if d := diffChanges(got, want); d != "" {
		t.Fatal(d)
	}
}

// TestReadChangedSharesStates: ReadChanged copies the entries of a clean
// subtree from prev, so they hold prev's very states (the pointers the
// checkpoint change list compares to skip encoding them again), and
// gives every entry it classifies afresh states of its own, even equal
// ones: a shared state always means an entry taken as it was.
func TestReadChangedSharesStates(t *testing.T) {
	upper, lower := t.TempDir(), t.TempDir()
	for _, p := range []string{"a/x", "b/y"} {
		if err := os.MkdirAll(filepath.Join(upper, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(upper, p), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prev, err := Read(upper, lower, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dirty := func(p attest.Path) bool { return p == attest.Root || attest.Within(p, "b") }
	now, err := ReadChanged(upper, lower, prev, dirty, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := map[attest.Path]*attest.Entry{}
	for i := range prev.Entries {
		before[prev.Entries[i].Path] = &prev.Entries[i]
	}
	seen := 0
	for _, e := range now.Entries {
		p := before[e.Path]
		if p == nil || e.New == nil {
			continue
		}
		if e.Path != attest.Root {
			seen++
		}
		shared := e.New == p.New && e.Old == p.Old
		if clean := !dirty(e.Path); shared != clean {
			t.Errorf("%s: shares its states with the previous read: %v; clean: %v", e.Path, shared, clean)
		}
		if !reflect.DeepEqual(*e.New, *p.New) {
			t.Errorf("%s: state %+v, was %+v", e.Path, *e.New, *p.New)
		}
	}
	if seen != 4 {
		t.Errorf("compared %d entries, want a, a/x, b and b/y", seen)
	}
}
