package overlay

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// TestApplyOwnersNodesPrivileged covers what needs root: owners, setuid
// kept after chown, device nodes, FIFOs, socket nodes, trusted xattrs on a
// file and on a symlink.
func TestApplyOwnersNodesPrivileged(t *testing.T) {
	privtest.Require(t)
	base := t.TempDir()
	lower, merged := filepath.Join(base, "lower"), filepath.Join(base, "merged")
	applyTestLower(t, lower)
	applyTestMust(t, unix.Mkfifo(filepath.Join(lower, "fifo"), 0o644))
	applyTestMust(t, unix.Mknod(filepath.Join(lower, "oldsock"), unix.S_IFSOCK|0o644, 0))
	applyTestCopy(t, lower, merged)
	p := func(rel string) string { return filepath.Join(merged, rel) }
	applyTestWrite(t, p("suid"), "#!/bin/true\n", 0o644)
	applyTestMust(t, os.Lchown(p("suid"), 1234, 5678))
	applyTestMust(t, unix.Chmod(p("suid"), 0o4755))
	applyTestMust(t, os.Lchown(p("a.txt"), 42, 43))
	applyTestMust(t, unix.Chmod(p("a.txt"), 0o2750))
	applyTestMust(t, unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	applyTestMust(t, unix.Mknod(p("blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))))
	applyTestMust(t, unix.Mknod(p("sock"), unix.S_IFSOCK|0o755, 0))
	applyTestMust(t, unix.Chmod(p("fifo"), 0o600))
	applyTestMust(t, os.Lchown(p("fifo"), 7, 8))
	applyTestMust(t, os.Remove(p("oldsock")))
	applyTestMust(t, unix.Mkfifo(p("oldsock"), 0o640))
	applyTestMust(t, unix.Lsetxattr(p("e.txt"), "trusted.layerseal-test", []byte("t"), 0))
	applyTestMust(t, os.Symlink("target", p("tlink")))
	applyTestMust(t, unix.Lsetxattr(p("tlink"), "trusted.on-symlink", []byte("s"), 0))
	applyTestMust(t, os.Lchown(p("tlink"), 99, 98))
	applyTestMust(t, os.MkdirAll(p("owned/sub"), 0o700))
	applyTestMust(t, os.Lchown(p("owned"), 1000, 1000))
	applyTestMust(t, unix.Chmod(p("owned"), 0o1777))
	entries := applyTestEntries(t, lower, merged)
	want := applyTestManifest(t, merged)
	if err := Apply(merged, lower, entries, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	applyTestEqual(t, want, lower)
	if err := Apply(merged, lower, entries, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	applyTestEqual(t, want, lower)
}

// TestApplyOverlayEndToEndPrivileged runs the agent's changes on a real
// overlay, records the merged view with the independent oracle, unmounts,
// applies the change set to the lower layer and expects exactly the merged
// view, with the upper layer untouched.
func TestApplyOverlayEndToEndPrivileged(t *testing.T) {
	privtest.Require(t)
	f := kernelFeatures(t)
	// Never unlocked: the thread, and the mount namespace with it, ends
	// with the test.
	runtime.LockOSThread()
	applyTestMust(t, unix.Unshare(unix.CLONE_NEWNS))
	applyTestMust(t, unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	work, merged := filepath.Join(base, "work"), filepath.Join(base, "merged")
	applyTestLower(t, lower)
	for _, d := range []string{upper, work, merged} {
		applyTestMust(t, os.Mkdir(d, 0o755))
	}
	// Mounted as layerseal mounts it: without the droppable options the
	// kernel refuses, as the probe found.
	_, err := performPinned(f, lower, upper, work, merged)
	applyTestMust(t, err)
	mounted := true
	t.Cleanup(func() {
		if mounted {
			unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	applyTestMutate(t, merged, false)
	entries := applyTestEntries(t, lower, merged)
	want := applyTestLowerLink(applyTestManifest(t, merged))
	applyTestMust(t, unix.Unmount(merged, 0))
	mounted = false

	for i := range entries {
		e := &entries[i]
		if e.New == nil || e.New.Type != attest.Dir || e.Old == nil || e.Old.Type != attest.Dir {
			continue
		}
		buf := make([]byte, 8)
		if n, err := unix.Lgetxattr(filepath.Join(upper, string(e.Path)), "trusted.overlay.opaque", buf); err == nil && string(buf[:n]) == "y" {
			e.Change = attest.Replaced
		}
	}
	var replaced bool
	for _, e := range entries {
		replaced = replaced || (e.Path == "s" && e.Change == attest.Replaced)
	}
	if !replaced {
		t.Fatal("scenario: the overlay did not make s an opaque directory")
	}

	upperBefore := applyTestManifest(t, upper)
	if err := Apply(upper, lower, entries, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	applyTestEqual(t, want, lower)
	applyTestEqual(t, upperBefore, upper)
}
