package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/treediff"
)

// protectedForTest stands in for policy globs (the policy package imports
// nothing of overlay and is tested on its own): a path is protected when
// it equals one of these or lies beneath one ending in "/".
var protectedForTest = []string{".env", ".env.local", ".github/workflows/", "deploy/", "cfg/secret", "rep/d/x", "lnk"}

func isProtected(p string) bool {
	for _, g := range protectedForTest {
		if d, ok := strings.CutSuffix(g, "/"); ok {
			if p == d || strings.HasPrefix(p, g) {
				return true
			}
		} else if p == g {
			return true
		}
	}
	return false
}

// TestRevertRealOverlay makes every kind of change to protected paths in a
// real overlay, reverts the changed protected paths in the upper layer,
// mounts the overlay again and checks with the independent oracle that the
// merged view equals the lower layer on every protected path while every
// other change stays, and that Read agrees with the kernel's view.
func TestRevertRealOverlay(t *testing.T) {
	privtest.Require(t)
	old := time.Unix(1_600_000_000, 0)
	lower, upper, work, merged := layers(t, func(l string) error {
		files := map[string]string{
			".env": "SECRET=1", ".github/workflows/ci.yml": "ci", ".github/workflows/other.yml": "o",
			".github/README": "r", "deploy/prod.yml": "prod", "deploy/keep": "k", "cfg/secret": "s",
			"src/a.go": "a", "rep/d/x": "x", "rep/d/y": "y", "rep/z": "z",
		}
		for name, data := range files {
			p := filepath.Join(l, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				return err
			}
		}
		if err := errors.Join(unix.Setxattr(filepath.Join(l, ".github/workflows/ci.yml"), "user.origin", []byte("lower"), 0),
			os.Chown(filepath.Join(l, "deploy/prod.yml"), 123, 456), os.Chmod(filepath.Join(l, "deploy/prod.yml"), 0o640),
			os.Symlink("src/a.go", filepath.Join(l, "lnk"))); err != nil {
			return err
		}
		return filepath.Walk(l, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return unix.Lutimes(p, []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())})
		})
	})
	mount := func() error {
		return unix.Mount("overlay", merged, "overlay", 0,
			fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", lower, upper, work, pinnedOpts))
	}
	var view treediff.Manifest
	inMountNS(t, func() error {
		if err := mount(); err != nil {
			return fmt.Errorf("mount overlay: %w", err)
		}
		m := func(name string) string { return filepath.Join(merged, name) }
		write := func(name, data string) error { return os.WriteFile(m(name), []byte(data), 0o644) }
		err := errors.Join(
			os.Remove(m(".env")),                                        // deletion: a whiteout
			write(".env.local", "LEAK=1"),                               // a new file git would ignore
			os.Rename(m("cfg/secret"), m("cfg/moved")),                  // rename of a protected file
			os.Chmod(m("deploy/prod.yml"), 0o666),                       // metadata only
			os.RemoveAll(m(".github")),                                  // replaced directory ...
			os.MkdirAll(m(".github/workflows"), 0o755),                  // ... made again
			write(".github/workflows/evil.yml", "curl | sh"),            // ... with a new file
			write(".github/NEW", "n"),                                   // an allowed change beside it
			os.RemoveAll(m("rep")),                                      // the protected file's parent's parent replaced
			os.MkdirAll(m("rep/d"), 0o755),                              // ... and its parent made again, empty
			write("src/a.go", "changed"),                                // unprotected
			write("src/new.go", "new"),                                  // unprotected
			errors.Join(os.Remove(m("lnk")), os.Mkdir(m("lnk"), 0o755)), // type change of a symlink
		)
		if err != nil {
			return err
		}
		return unix.Unmount(merged, 0)
	})

	ch, err := Read(upper, lower, ReadOptions{WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	var reverted []string
	for _, e := range ch.Entries {
		if isProtected(string(e.Path)) {
			reverted = append(reverted, string(e.Path))
			if err := Revert(upper, lower, e.Path, RevertOptions{}); err != nil {
				t.Fatalf("Revert(%q): %v", e.Path, err)
			}
		}
	}
	for _, want := range []string{".env", ".env.local", "cfg/secret", "deploy/prod.yml", ".github/workflows/ci.yml", ".github/workflows/evil.yml", "rep/d/x", "lnk"} {
		if !strings.Contains(strings.Join(reverted, "\n")+"\n", want+"\n") {
			t.Errorf("Read did not report %q as changed: %q", want, reverted)
		}
	}
	// Reverting again changes nothing.
	before, err := treediff.Walk(upper)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range reverted {
		if err := Revert(upper, lower, attest.Path(p), RevertOptions{}); err != nil {
			t.Fatalf("second Revert(%q): %v", p, err)
		}
	}
	if after, _ := treediff.Walk(upper); treediff.Equal(before, after) != "" {
		t.Errorf("a second revert changed the upper layer: %s", treediff.Equal(before, after))
	}

	inMountNS(t, func() error {
		if err := mount(); err != nil {
			return fmt.Errorf("mount overlay again: %w", err)
		}
		var err error
		view, err = treediff.Walk(merged)
		return errors.Join(err, unix.Unmount(merged, 0))
	})
	base, err := treediff.Walk(lower)
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range base {
		if isProtected(p) {
			if got, ok := view[p]; !ok {
				t.Errorf("protected %q missing after the revert", p)
			} else if n.Links, got.Links = nil, nil; treediff.Equal(treediff.Manifest{p: n}, treediff.Manifest{p: got}) != "" {
				// (Links are dropped: a renamed copy-up keeps the lower
				// inode number, so the oracle sees a link that is none.)
				d := treediff.Equal(treediff.Manifest{p: n}, treediff.Manifest{p: got})
				t.Errorf("protected %q differs from the lower layer: %s", p, d)
			}
		}
	}
	for p := range view {
		if _, ok := base[p]; !ok && isProtected(p) {
			t.Errorf("protected %q still added after the revert", p)
		}
	}
	for p, want := range map[string]bool{"src/new.go": true, "cfg/moved": true, ".github/NEW": true, ".github/README": false, "rep/d/y": false, "rep/z": false} {
		if _, ok := view[p]; ok != want {
			t.Errorf("unprotected %q present = %t, want %t (the agent's change must stay)", p, ok, want)
		}
	}
	if view["src/a.go"].Size != int64(len("changed")) {
		t.Errorf("unprotected src/a.go lost its change")
	}

	// The reader's account of the swept upper layer is the kernel's view.
	after, err := Read(upper, lower, ReadOptions{WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	oracle := map[string]string{}
	for _, c := range treediff.Diff(base, view) {
		oracle[c.Path] = c.Change
	}
	got := map[string]string{}
	for _, e := range after.Entries {
		if isProtected(string(e.Path)) {
			t.Errorf("after the sweep Read still reports %s %q", e.Change, e.Path)
		}
		if e.Change != attest.Replaced {
			got[string(e.Path)] = string(e.Change)
		}
	}
	for p, c := range oracle {
		if got[p] != c && !(c == "metadata" && got[p] == "") {
			t.Errorf("%q: Read says %q after the sweep, the kernel's view %q", p, got[p], c)
		}
	}
}
