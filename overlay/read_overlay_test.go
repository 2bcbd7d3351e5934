package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// pinnedOpts is the mount(2) option string of an overlay mounted as
// layerseal mounts it on this kernel: the pinned options the probe's trial
// mounts found it takes (set by TestMain in mount_test.go; all of Pinned
// when privileged tests are off, and then nothing mounts). Tests that can
// mount through Perform use performPinned instead.
var pinnedOpts = strings.Join(Pinned, ",")

// layers makes lower, upper, work and merged dirs, the lower one filled by
// fill, the upper root given the lower root's mode, owner and mtime (as
// the merged root's metadata is the upper root's).
func layers(t *testing.T, fill func(lower string) error) (lower, upper, work, merged string) {
	t.Helper()
	base := t.TempDir()
	lower, upper, work, merged = filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := fill(lower); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(lower, &st); err != nil {
		t.Fatal(err)
	}
	err := errors.Join(os.Chmod(upper, os.FileMode(st.Mode&0o777)), os.Lchown(upper, int(st.Uid), int(st.Gid)),
		unix.UtimesNanoAt(unix.AT_FDCWD, upper, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW))
	if err != nil {
		t.Fatal(err)
	}
	return
}

// step is one operation done in the merged view and its error.
type step struct {
	what string
	err  error
}

func TestReadRealOverlay(t *testing.T) {
	privtest.Require(t)
	old := time.Unix(1_600_000_000, 0)
	lower, upper, work, merged := layers(t, func(l string) error {
		files := map[string]string{
			"keep": "keep", "opened": "opened", "edit": "hello", "trunc": "abcdef", "app": "x",
			"chm": "c", "cho": "c", "tch": "t", "xat": "x", "esc": "e", "rmf": "r", "same": "same",
			"d/a": "a", "d/sub/b": "b", "re/old": "o", "mvf": "m", "mvd/c": "c", "deep/x/y": "y",
			"cd/f": "f",
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
		if err := os.Symlink("keep", filepath.Join(l, "sym")); err != nil {
			return err
		}
		// Fixed times everywhere, so only what the agent touches differs.
		return filepath.Walk(l, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return unix.Lutimes(p, []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())})
		})
	})

	f := kernelFeatures(t)
	noMountID := mountIDLines(t)
	// inMountNS (mount_test.go) runs this on a thread in a private mount namespace.
	inMountNS(t, func() error {
		if _, err := performPinned(f, lower, upper, work, merged); err != nil {
			return err
		}
		m := func(name string) string { return filepath.Join(merged, name) }
		write := func(name, data string) error { return os.WriteFile(m(name), []byte(data), 0o644) }
		openNoWrite := func(name string) error {
			f, err := os.OpenFile(m(name), os.O_WRONLY, 0)
			if err == nil {
				err = f.Close()
			}
			return err
		}
		appendTo := func(name, data string) error {
			f, err := os.OpenFile(m(name), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString(data)
			return errors.Join(err, f.Close())
		}
		renameDir := func(from, to string) error {
			// With redirect_dir=nofollow a lower dir cannot be renamed:
			// tools fall back to copy and delete.
			if err := os.Rename(m(from), m(to)); !errors.Is(err, unix.EXDEV) {
				return fmt.Errorf("rename of a lower dir: %v, want EXDEV", err)
			}
			if err := os.Mkdir(m(to), 0o755); err != nil {
				return err
			}
			if err := write(to+"/c", "c"); err != nil {
				return err
			}
			return os.RemoveAll(m(from))
		}
		// Overlay stores a trusted.overlay.* xattr set through it escaped
		// (Linux 6.7); older kernels refuse it. Which one this kernel does
		// is found by trying, and the expected change set follows.
		escaped := true
		escapeErr := unix.Setxattr(m("esc"), "trusted.overlay.mine", []byte("v"), 0)
		if errors.Is(escapeErr, unix.EOPNOTSUPP) {
			escaped, escapeErr = false, nil
		}
		steps := []step{
			{"create", write("new", "new")},
			{"open for write, no write", openNoWrite("opened")},
			{"modify same size", write("edit", "HELLO")},
			{"truncate and rewrite same bytes", write("trunc", "abcdef")},
			{"append", appendTo("app", "y")},
			{"chmod", os.Chmod(m("chm"), 0o600)},
			{"chown", os.Lchown(m("cho"), 1234, 1234)},
			{"touch", os.Chtimes(m("tch"), old, old.Add(time.Hour))},
			{"setxattr user.x", unix.Setxattr(m("xat"), "user.x", []byte("1"), 0)},
			{"setxattr escaped", escapeErr},
			{"rm file", os.Remove(m("rmf"))},
			{"rm -rf dir", os.RemoveAll(m("d"))},
			{"rm -rf and recreate dir", errors.Join(os.RemoveAll(m("re")), os.Mkdir(m("re"), 0o755), write("re/fresh", "f"))},
			{"rename file", os.Rename(m("mvf"), m("mvf2"))},
			{"rename dir", renameDir("mvd", "mvd2")},
			{"hard link", os.Link(m("keep"), m("keeplink"))},
			{"new hard-linked pair", errors.Join(write("pair1", "p"), os.Link(m("pair1"), m("pair0")))},
			{"symlink", os.Symlink("/abs/target", m("newsym"))},
			{"retarget symlink", errors.Join(os.Remove(m("sym")), os.Symlink("edit", m("sym")))},
			{"mkfifo", unix.Mkfifo(m("pipe"), 0o640)},
			{"create then delete", errors.Join(write("tmp", "t"), os.Remove(m("tmp")), os.MkdirAll(m("tmpd/x"), 0o755), os.RemoveAll(m("tmpd")))},
			{"odd names", errors.Join(write("new\nline", "n"), write("bad\xff", "b"), write("sp ace", "s"))},
			{"modify deep", write("deep/x/y", "Y")},
			{"chmod lower dir", os.Chmod(m("cd"), 0o700)},
			{"delete and recreate same content", errors.Join(os.Remove(m("same")), write("same", "same"))},
		}
		for _, s := range steps {
			if s.err != nil {
				t.Errorf("%s: %v", s.what, s.err)
			}
		}
		if err := unix.Unmount(merged, 0); err != nil {
			return fmt.Errorf("unmount: %w", err)
		}
		ch, err := Read(upper, lower, ReadOptions{WorkDir: work})
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		var escLines []string
		if escaped {
			escLines = lines("metadata esc")
		}
		equalLines(t, summary(ch), slices.Concat(lines(
			"metadata .",
			"modified app",
			"added bad\xff",
			"metadata cd",
			"metadata chm",
			"metadata cho",
			"deleted d",
			"deleted d/a",
			"deleted d/sub",
			"deleted d/sub/b",
			"modified deep/x/y",
			"modified edit"), escLines, lines(
			"added keeplink",
			"deleted mvd",
			"deleted mvd/c",
			"added mvd2",
			"added mvd2/c",
			"deleted mvf",
			"added mvf2",
			"added new",
			"added new\nline",
			"added newsym",
			"added pair0",
			"added pair1",
			"added pipe",
			"replaced re",
			"added re/fresh",
			"deleted re/old",
			"deleted rmf",
			"metadata same",
			"added sp ace",
			"modified sym",
			"metadata tch",
			"metadata trunc",
			"metadata xat",
		), noMountID))
		for _, e := range ch.Entries {
			switch e.Path {
			case "keeplink":
				if e.New.Link != "keep" {
					t.Errorf("keeplink: Link %q, want \"keep\"", e.New.Link)
				}
			case "pair0", "pair1":
				if e.New.Link != "pair0" {
					t.Errorf("%s: Link %q, want \"pair0\"", e.Path, e.New.Link)
				}
			case "esc": // only when escaped
				want := []attest.Xattr{{Name: "trusted.overlay.mine", Value: []byte("v")}}
				if !xattrsEqual(e.New.Xattrs, want) || len(e.Old.Xattrs) != 0 {
					t.Errorf("esc: xattrs %+v -> %+v", e.Old.Xattrs, e.New.Xattrs)
				}
			case "pipe":
				if e.New.Type != attest.FIFO || e.New.Mode != 0o640 {
					t.Errorf("pipe: %+v", e.New)
				}
			case "sym":
				if e.Old.Target != "keep" || e.New.Target != "edit" {
					t.Errorf("sym: %q -> %q", e.Old.Target, e.New.Target)
				}
			case "cho":
				if e.New.UID != 1234 || e.New.GID != 1234 || e.Old.UID != 0 {
					t.Errorf("cho: %+v -> %+v", e.Old, e.New)
				}
			}
		}
		return nil
	})
	if t.Failed() {
		return
	}
	// The same layers with the mount IDs ignored: told apart by st_dev,
	// and said so.
	ch, err := Read(upper, lower, ReadOptions{NoMountID: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := summary(ch); !slices.Contains(got, "!no-mount-id ") || !slices.Contains(got, "added new") {
		t.Errorf("NoMountID: %q", got)
	}
}

func TestReadRealOverlayOtherMount(t *testing.T) {
	privtest.Require(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "inside"), []byte("i"), 0o644); err != nil {
		t.Fatal(err)
	}
	lower, upper, work, merged := layers(t, func(l string) error {
		return errors.Join(os.Mkdir(filepath.Join(l, "bm"), 0o755), os.WriteFile(filepath.Join(l, "f"), nil, 0o644))
	})
	f := kernelFeatures(t)
	noMountID := mountIDLines(t)
	inMountNS(t, func() error {
		if err := unix.Mount(src, filepath.Join(lower, "bm"), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		if _, err := performPinned(f, lower, upper, work, merged); err != nil {
			return err
		}
		// The overlay shows the directory beneath the bind mount; the
		// agent writes into it.
		err := errors.Join(
			os.WriteFile(filepath.Join(merged, "bm", "new"), []byte("n"), 0o644),
			os.WriteFile(filepath.Join(merged, "f"), []byte("F"), 0o644))
		if err != nil {
			return err
		}
		if err := unix.Unmount(merged, 0); err != nil {
			return fmt.Errorf("unmount: %w", err)
		}
		for _, c := range []struct {
			opt  ReadOptions
			want []string
		}{
			// The kernel's own mount IDs, if the probe found any.
			{ReadOptions{}, append(append(lines("modified f"), noMountID...), "!other-mount bm")},
			// Without mount IDs the bind mount (same st_dev) passes the
			// stat check, but openat2 still refuses to cross it.
			{ReadOptions{NoMountID: true}, lines("modified f", "!no-mount-id ", "!other-mount bm")},
		} {
			ch, err := Read(upper, lower, c.opt)
			if err != nil {
				return fmt.Errorf("read: %w", err)
			}
			equalLines(t, summary(ch), c.want)
		}
		return nil
	})
}
