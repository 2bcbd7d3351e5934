package overlay

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// layerDir makes the entries of one layer under root: "name/" a directory,
// "name -> target" a symlink, "name (whiteout)" a whiteout, "name/
// (opaque)" an opaque directory (trusted namespace), anything else an
// empty file.
func layerDir(t *testing.T, root string, entries ...string) {
	t.Helper()
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var err error
		name, target, isLink := strings.Cut(e, " -> ")
		name, kind, _ := strings.Cut(name, " ")
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case isLink:
			err = os.Symlink(target, p)
		case kind == "(whiteout)":
			err = unix.Mknod(p, unix.S_IFCHR, 0)
		case strings.HasSuffix(name, "/"):
			if err = os.MkdirAll(p, 0o755); err == nil && kind == "(opaque)" {
				err = unix.Setxattr(p, "trusted.overlay.opaque", []byte("y"), 0)
			}
		default:
			err = os.WriteFile(p, nil, 0o644)
		}
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
	}
}

// itemizedIn reads upper over lower with node_modules excluded and returns
// the paths listed under node_modules (itemized).
func itemizedIn(t *testing.T, upper, lower string) []string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(lower, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, upper, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	ch, err := Read(upper, lower, ReadOptions{Exclude: func(p attest.Path) bool { return p == "node_modules" }})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ch.Entries {
		if attest.Within(e.Path, "node_modules") {
			got = append(got, string(e.Path))
		}
	}
	return got
}

// TestExcludedSymlinkResolved: a symlink in an excluded subtree is
// itemized when its target, resolved through the links it passes in the
// merged view (upper over lower, whiteouts and opaque directories), leaves
// the subtree or cannot be resolved for certain; cleaned lexically, each
// of these stays inside. Links an ordinary package tree makes stay
// counted.
func TestExcludedSymlinkResolved(t *testing.T) {
	privtest.Require(t) // whiteouts and trusted xattrs
	base := t.TempDir()
	upper, lower := filepath.Join(base, "upper"), filepath.Join(base, "lower")
	layerDir(t, lower,
		"src/main.go",
		"src/back -> ../node_modules",
		"node_modules/pkg/lib/t -> ../../..", // lower only: up to the workspace root
		"node_modules/pkg/index.js",
		"node_modules/gone -> ../../etc", // hidden by a whiteout
		"node_modules/od/l -> ../../etc", // hidden by an opaque directory
		"node_modules/od/sub/",
	)
	layerDir(t, upper,
		// The chain.
		"node_modules/t -> .",
		"node_modules/x -> t/t/t/../../../etc",
		"node_modules/x2 -> t/t/../src", // the workspace's src
		// A loop, a self loop, too many links.
		"node_modules/l1 -> l2",
		"node_modules/l2 -> l1",
		"node_modules/l3 -> l3/a",
		"node_modules/far -> "+strings.Repeat("t/", 41)+"pkg",
		// Through a link that leaves, and back in through one outside.
		"node_modules/out -> ../src",
		"node_modules/y -> out/y",
		"node_modules/back -> out/back/pkg",
		// Through a lower-only directory and a lower-only symlink.
		"node_modules/u -> pkg/lib/t/etc",
		"node_modules/ok -> pkg/lib/../index.js",
		// A whiteout on the way: the lower link it hides is not followed.
		"node_modules/gone (whiteout)",
		"node_modules/w -> gone",
		"node_modules/w2 -> gone/x",
		// An opaque directory: the lower entries it hides are not there.
		"node_modules/od/ (opaque)",
		"node_modules/o -> od/l",
		"node_modules/o2 -> od/sub/../../..",
		// An ordinary package tree.
		"node_modules/.bin/cli -> ../pkg2/bin/cli.js",
		"node_modules/pkg2/bin/cli.js",
		"node_modules/pkg2/node_modules/dep -> ../../dep",
		"node_modules/dep/",
		"node_modules/dangling -> not-installed",
		"node_modules/self -> .",
		"node_modules/up -> ..", // the workspace root: leaves
	)
	got := itemizedIn(t, upper, lower)
	want := []string{
		"node_modules/far", "node_modules/l1", "node_modules/l2", "node_modules/l3",
		"node_modules/o2", "node_modules/out", "node_modules/u", "node_modules/up",
		"node_modules/w2", "node_modules/x", "node_modules/x2", "node_modules/y",
	}
	if !slices.Equal(got, want) {
		t.Errorf("itemized:\n got %q\nwant %q", got, want)
	}
}

// TestExcludedSymlinkUnsure: a component on the way that cannot be read
// (stat, open, readlink or xattrs failing) makes the symlink count as
// leaving; so does the read's work bound once spent.
func TestExcludedSymlinkUnsure(t *testing.T) {
	upper := fx{
		"node_modules/d":        dir().fail("open", unix.EACCES),
		"node_modules/k":        symlink("d/../pkg"),
		"node_modules/rl":       symlink("pkg").fail("readlink", unix.EIO),
		"node_modules/k2":       symlink("rl/../pkg"),
		"node_modules/xa":       dir().fail("xattrs", unix.EIO),
		"node_modules/k3":       symlink("xa/../pkg"),
		"node_modules/pkg/a":    file("a"),
		"node_modules/fine":     symlink("pkg/a"),
		"node_modules/nonexist": symlink("missing"),
	}
	upper["node_modules/lower"] = symlink("ld/x")
	lower := fx{"node_modules/ld": dir().fail("lstat", unix.EACCES)}
	ch, err := readFx(t, upper, lower, ReadOptions{Exclude: func(p attest.Path) bool { return p == "node_modules" }})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ch.Entries {
		if e.New != nil && e.New.Type == attest.Symlink {
			got = append(got, string(e.Path))
		}
	}
	// rl itself, unreadable, is itemized as a reason (not checked here).
	want := []string{"node_modules/k", "node_modules/k2", "node_modules/k3", "node_modules/lower"}
	if !slices.Equal(got, want) {
		t.Errorf("itemized symlinks:\n got %q\nwant %q", got, want)
	}

	// The read's work bound: once spent, every target is unsure.
	rs := resolver{u: fx{"a/b/c": file("")}.build(t), steps: 3}
	if at, ok, out := rs.resolve("a", "b/c", "a"); !ok || out || at != "a/b/c" {
		t.Errorf("within the bound: %q, %v, outside %v", at, ok, out)
	}
	if _, ok, _ := rs.resolve("a", "b/c", "a"); ok {
		t.Error("the read's work bound spent, a target still resolved")
	}
}

// TestReadChangedExcludedOutward: a symlink in a clean excluded subtree
// whose target passes a link outside it is resolved again by ReadChanged
// when that link changes, as a fresh Read would; a subtree whose links
// stay inside it is still taken from the previous read.
func TestReadChangedExcludedOutward(t *testing.T) {
	base := t.TempDir()
	upper, lower := filepath.Join(base, "upper"), filepath.Join(base, "lower")
	layerDir(t, lower)
	layerDir(t, upper,
		"node_modules/out -> ../src",
		"node_modules/y -> out/back/pkg", // back into node_modules, for now
		"node_modules/pkg/",
		"src/back -> ../node_modules",
		"vendor/a/",
		"vendor/l -> a",
	)
	var st unix.Stat_t
	if err := unix.Lstat(lower, &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, upper, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	opt := ReadOptions{Exclude: func(p attest.Path) bool { return p == "node_modules" || p == "vendor" }}
	prev, err := Read(upper, lower, opt)
	if err != nil {
		t.Fatal(err)
	}
	itemized := func(ch *Changes) []string {
		var got []string
		for _, e := range ch.Entries {
			if attest.Within(e.Path, "node_modules") || attest.Within(e.Path, "vendor") {
				got = append(got, string(e.Path))
			}
		}
		return got
	}
	if got := itemized(prev); !slices.Equal(got, []string{"node_modules/out"}) {
		t.Fatalf("first read itemized %q", got)
	}
	// src/back now leads to the workspace root: y leaves.
	back := filepath.Join(upper, "src/back")
	if err := os.Remove(back); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", back); err != nil {
		t.Fatal(err)
	}
	dirty := func(p attest.Path) bool { return attest.Within(attest.Path("src/back"), p) }
	ch, err := ReadChanged(upper, lower, prev, dirty, opt)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := Read(upper, lower, opt)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node_modules/out", "node_modules/y"}
	if got := itemized(fresh); !slices.Equal(got, want) {
		t.Errorf("fresh read itemized %q, want %q", got, want)
	}
	if got := itemized(ch); !slices.Equal(got, want) {
		t.Errorf("ReadChanged itemized %q, want %q as a fresh read", got, want)
	}
	// vendor was taken from the previous read: only node_modules and src
	// (with the root) were examined.
	if ch.Stats.UpperEntries >= fresh.Stats.UpperEntries {
		t.Errorf("ReadChanged examined %d upper entries, a fresh read %d: vendor was not reused", ch.Stats.UpperEntries, fresh.Stats.UpperEntries)
	}
}
