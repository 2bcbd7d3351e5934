package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

// tree makes dir/{a/b/file, a/link -> b, a/abs -> /, top} and returns an
// O_PATH descriptor of dir.
func tree(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "a", "b", "file"), []byte("content"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "top"), nil, 0o644))
	must(t, os.Symlink("b", filepath.Join(dir, "a", "link")))
	must(t, os.Symlink("/", filepath.Join(dir, "a", "abs")))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return dir, fd
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// openers are OpenBeneath with openat2 (where the kernel has it) and its
// fallback, called directly since DisableOpenat2 is process-wide.
var openers = map[string]func(int, string, int) (int, error){
	"OpenBeneath":    OpenBeneath,
	"openComponents": openComponents,
}

func TestOpenBeneathRefuses(t *testing.T) {
	_, root := tree(t)
	for oname, open := range openers {
		for _, c := range []struct {
			name  string
			flags int
			errno unix.Errno
		}{
			{"a/link/file", unix.O_RDONLY, 0},     // intermediate symlink
			{"a/link", unix.O_RDONLY, unix.ELOOP}, // trailing symlink
			{"a/abs/etc", unix.O_RDONLY, 0},
			{"..", unix.O_RDONLY, unix.EXDEV},
			{"a/../top", unix.O_RDONLY, unix.EXDEV},
			{"a/b/../../..", unix.O_RDONLY, unix.EXDEV},
			{"/etc", unix.O_RDONLY, unix.EXDEV},
			{"", unix.O_RDONLY, unix.EXDEV},
			{"top/x", unix.O_RDONLY, unix.ENOTDIR},
			{"missing", unix.O_RDONLY, unix.ENOENT},
		} {
			fd, err := open(root, c.name, c.flags)
			if err == nil {
				unix.Close(fd)
				t.Errorf("%s(%q) opened", oname, c.name)
				continue
			}
			if c.errno != 0 && !errors.Is(err, c.errno) {
				t.Errorf("%s(%q): %v, want %v", oname, c.name, err, c.errno)
			}
			var pe *os.PathError
			if !errors.As(err, &pe) || pe.Path != c.name {
				t.Errorf("%s(%q): error %v does not name the path", oname, c.name, err)
			}
		}
	}
}

func TestOpenBeneathOpens(t *testing.T) {
	_, root := tree(t)
	for oname, open := range openers {
		for _, name := range []string{"a/b/file", "./a//b/file", "top", ".", "a/b/"} {
			fd, err := open(root, name, unix.O_RDONLY)
			if err != nil {
				t.Errorf("%s(%q): %v", oname, name, err)
				continue
			}
			if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
				t.Errorf("%s(%q): not close-on-exec", oname, name)
			}
			unix.Close(fd)
		}
		// O_PATH|O_NOFOLLOW on a trailing symlink opens the link itself.
		fd, err := open(root, "a/link", unix.O_PATH)
		if err != nil {
			t.Fatalf("%s: O_PATH symlink: %v", oname, err)
		}
		st, err := Lstat(fd, "")
		unix.Close(fd)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			t.Errorf("%s: O_PATH symlink: mode %o, %v", oname, st.Mode, err)
		}
	}
}

func TestLstat(t *testing.T) {
	dir, root := tree(t)
	st, err := Lstat(root, "a/link")
	must(t, err)
	if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Size != 1 {
		t.Errorf("symlink: mode %o size %d", st.Mode, st.Size)
	}
	st, err = Lstat(root, "a/b/file")
	must(t, err)
	var ref unix.Stat_t
	must(t, unix.Lstat(filepath.Join(dir, "a", "b", "file"), &ref))
	if st.Ino != ref.Ino || st.Dev != ref.Dev || st.Size != 7 || st.Mode != ref.Mode || st.Nlink != 1 ||
		st.MtimeNS != ref.Mtim.Nano() || st.CtimeNS != ref.Ctim.Nano() {
		t.Errorf("statx %+v disagrees with lstat %+v", st, ref)
	}
	// The mount ID is what statx, asked directly, reports: none where
	// statx itself is refused (before Linux 4.11, or under a seccomp
	// filter) or leaves STATX_MNT_ID out of its mask (before 5.8).
	var sx unix.Statx_t
	err = unix.Statx(unix.AT_FDCWD, filepath.Join(dir, "a", "b", "file"), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &sx)
	switch {
	case errors.Is(err, unix.ENOSYS):
		if st.HasMountID || st.MountID != 0 {
			t.Errorf("a mount ID without statx: %+v", st)
		}
	case err != nil:
		t.Fatalf("statx: %v", err)
	case sx.Mask&unix.STATX_MNT_ID == 0:
		if st.HasMountID || st.MountID != 0 {
			t.Errorf("a mount ID though statx reports none: %+v", st)
		}
	case !st.HasMountID || st.MountID != sx.Mnt_id || st.MountID == 0:
		t.Errorf("mount ID %d (has %v), statx reports %d: %+v", st.MountID, st.HasMountID, sx.Mnt_id, st)
	}
	self, err := Lstat(root, "")
	must(t, err)
	if self.Mode&unix.S_IFMT != unix.S_IFDIR || !SameMount(self, st) {
		t.Errorf("AT_EMPTY_PATH: %+v", self)
	}
	if _, err := Lstat(root, "missing"); !errors.Is(err, unix.ENOENT) {
		t.Errorf("missing: %v", err)
	}
}

func TestReadDirNamesMax(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for _, n := range []string{"a", "new\nline", "bad\xff", "sp ace"} {
		must(t, os.WriteFile(filepath.Join(dir, n), nil, 0o644))
		want = append(want, n)
	}
	open := func() int {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	got, err := ReadDirNamesMax(open(), 0)
	must(t, err)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
	got, err = ReadDirNamesMax(open(), 2)
	must(t, err)
	if len(got) <= 2 {
		t.Errorf("limit 2 of 4: got %d names, want more than 2", len(got))
	}
}

func TestReopen(t *testing.T) {
	dir, root := tree(t)
	fd, err := OpenBeneath(root, "a/b/file", unix.O_PATH)
	must(t, err)
	defer unix.Close(fd)
	// Replace the name: the reopened file is still the one fd holds.
	must(t, os.Rename(filepath.Join(dir, "a", "b", "file"), filepath.Join(dir, "moved")))
	must(t, os.WriteFile(filepath.Join(dir, "a", "b", "file"), []byte("other"), 0o644))
	rfd, err := Reopen(fd, unix.O_RDONLY)
	must(t, err)
	defer unix.Close(rfd)
	buf := make([]byte, 16)
	n, err := unix.Read(rfd, buf)
	must(t, err)
	if string(buf[:n]) != "content" {
		t.Errorf("reopened file holds %q", buf[:n])
	}
}

func TestXattrsThroughOPath(t *testing.T) {
	dir, root := tree(t)
	file := filepath.Join(dir, "top")
	if err := unix.Setxattr(file, "user.big", make([]byte, 1000), 0); errors.Is(err, unix.ENOTSUP) {
		t.Fatalf("the test filesystem has no user xattrs: %v", err)
	} else {
		must(t, err)
	}
	must(t, unix.Setxattr(file, "user.small", []byte("v"), 0))
	fd, err := OpenBeneath(root, "top", unix.O_PATH)
	must(t, err)
	defer unix.Close(fd)
	names, err := Listxattr(fd)
	must(t, err)
	slices.Sort(names)
	if !slices.Equal(names, []string{"user.big", "user.small"}) {
		t.Errorf("names %q", names)
	}
	v, err := Getxattr(fd, "user.big")
	must(t, err)
	if len(v) != 1000 {
		t.Errorf("user.big: %d bytes (ERANGE retry)", len(v))
	}
	if _, err := Getxattr(fd, "user.none"); !errors.Is(err, unix.ENODATA) {
		t.Errorf("missing xattr: %v", err)
	}
}

// TestSymlinkXattrs: user.* xattrs are not allowed on symlinks, so this
// needs trusted.*, that is root.
func TestSymlinkXattrs(t *testing.T) {
	privtest.Require(t)
	dir, root := tree(t)
	link := filepath.Join(dir, "a", "link")
	must(t, unix.Lsetxattr(link, "trusted.on-link", []byte("L"), 0))
	must(t, unix.Setxattr(filepath.Join(dir, "a", "b"), "trusted.on-target", []byte("T"), 0))
	fd, err := OpenBeneath(root, "a/link", unix.O_PATH)
	must(t, err)
	defer unix.Close(fd)
	names, err := Listxattr(fd)
	must(t, err)
	if !slices.Contains(names, "trusted.on-link") || slices.Contains(names, "trusted.on-target") {
		t.Errorf("xattrs of the symlink itself: %q", names)
	}
	v, err := Getxattr(fd, "trusted.on-link")
	if err != nil || string(v) != "L" {
		t.Errorf("getxattr: %q %v", v, err)
	}
	target, err := Readlinkat(fd, "")
	if err != nil || target != "b" {
		t.Errorf("readlink of the O_PATH fd: %q %v", target, err)
	}
}

func TestReadlinkatLong(t *testing.T) {
	dir, root := tree(t)
	long := string(slices.Repeat([]byte("x/"), 2000))
	must(t, os.Symlink(long, filepath.Join(dir, "long")))
	got, err := Readlinkat(root, "long")
	if err != nil || got != long {
		t.Errorf("long target: %d bytes, %v", len(got), err)
	}
	if _, err := Readlinkat(root, "top"); !errors.Is(err, unix.EINVAL) {
		t.Errorf("readlink of a file: %v", err)
	}
}

// TestOpenBeneathMounts: neither openat2 nor the fallback crosses a mount
// point beneath dirfd.
func TestOpenBeneathMounts(t *testing.T) {
	privtest.Require(t)
	dir, _ := tree(t)
	inPrivateMountNS(t, func() {
		// A descriptor opened before unshare would see the old namespace's mounts.
		root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(root)
		target := filepath.Join(dir, "a", "b")
		if err := unix.Mount("tmpfs", target, "tmpfs", 0, ""); err != nil {
			t.Errorf("mount tmpfs: %v", err)
			return
		}
		if err := os.WriteFile(filepath.Join(target, "in"), nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		for oname, open := range openers {
			for _, name := range []string{"a/b/in", "a/b"} {
				fd, err := open(root, name, unix.O_RDONLY)
				if err == nil {
					unix.Close(fd)
					t.Errorf("%s(%q) crossed a mount", oname, name)
				} else if !errors.Is(err, unix.EXDEV) {
					t.Errorf("%s(%q): %v, want EXDEV", oname, name, err)
				}
			}
		}
		outside, err1 := Lstat(root, "")
		inside, err2 := Lstat(root, "a/b")
		if err := errors.Join(err1, err2); err != nil {
			t.Error(err)
		} else if SameMount(outside, inside) {
			t.Errorf("mount IDs %d and %d: same mount", outside.MountID, inside.MountID)
		}
	})
}

// inPrivateMountNS runs fn on an OS thread moved into a new mount
// namespace with private propagation. The thread stays locked, so the
// runtime discards it when fn returns and no mount made by fn is seen
// outside. fn must report with t.Error, not t.Fatal.
func inPrivateMountNS(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- fmt.Errorf("unshare mount namespace: %w", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- fmt.Errorf("make mounts private: %w", err)
			return
		}
		fn()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
