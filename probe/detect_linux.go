//go:build linux

package probe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Detect tries every feature on the running kernel, then applies the
// simulations named in SimulateEnv (see Without). Run as root, it finds the
// overlay items by trial mounts made on a scratch tmpfs inside a private mount
// namespace of one OS thread, so no mount is ever visible outside it and none
// outlives the call; otherwise those items are Unknown with the detail
// "needs root". Its only error is a SimulateEnv value naming an unknown
// simulation.
func Detect() (Features, error) {
	sims, err := ParseSimulate(os.Getenv(SimulateEnv))
	if err != nil {
		return Features{}, err
	}
	return detect(os.Geteuid() == 0).Without(sims...)
}

// detect tries every feature; trialMounts says whether to try the overlay
// items by mounting.
func detect(trialMounts bool) Features {
	f := detectCheap()
	if trialMounts {
		trialOverlayItems(&f)
	} else {
		listed, listErr := overlayListed()
		switch {
		case listErr != nil:
			f.Overlay = Finding{Status: Unknown, Detail: "needs root; " + listErr.Error()}
		case listed:
			f.Overlay = Finding{Status: Yes, Detail: "listed in /proc/filesystems"}
		default:
			// The module may still load on the first mount.
			f.Overlay = Finding{Status: Unknown, Detail: "needs root; not listed in /proc/filesystems"}
		}
		setMountItems(&f, Finding{Status: Unknown, Detail: "needs root"})
	}
	// Read after the trial mounts, which may have loaded the module.
	f.OverlayParams, f.OverlayParamsNote = overlayParams()
	return f
}

// detectCheap tries the items that need no mount: the kernel release, statx
// and openat2. They take microseconds, so they are tried at every start,
// cache or not.
func detectCheap() Features {
	return Features{
		KernelRelease:      kernelRelease(),
		StatxMountID:       trialStatx(unix.STATX_MNT_ID),
		StatxMountIDUnique: trialStatx(unix.STATX_MNT_ID_UNIQUE),
		Openat2:            trialOpenat2(),
		LandlockScope:      trialLandlockScope(),
		Seccomp:            trialSeccomp(),
	}
}

// trialSeccomp asks the kernel whether it takes the actions of the agent's
// filter (SECCOMP_GET_ACTION_AVAIL; nothing is loaded).
func trialSeccomp() Finding {
	if err := linux.SeccompFiltersAvailable(); err != nil {
		return Finding{Status: No, Detail: errText(err)}
	}
	return Finding{Status: Yes, Detail: "SECCOMP_GET_ACTION_AVAIL"}
}

// trialOverlayItems sets the overlay items of f by trial mounts (as root).
func trialOverlayItems(f *Features) {
	listed, listErr := overlayListed()
	trialOverlay(f, PinnedOverlayOptions)
	if f.Overlay.Status == No && listErr == nil && !listed {
		f.Overlay.Detail += "; not listed in /proc/filesystems"
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// trialStatx reports whether statx of "/" asked for mask sets mask in the
// returned mask. Kernels ignore request bits they do not know, so the
// returned mask is the answer.
func trialStatx(mask int) Finding {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/", unix.AT_SYMLINK_NOFOLLOW, mask, &st); err != nil {
		return Finding{Status: No, Detail: "statx: " + errText(err)}
	}
	if st.Mask&uint32(mask) == 0 {
		return Finding{Status: No, Detail: "not in statx mask"}
	}
	return Finding{Status: Yes, Detail: "statx mask"}
}

// trialOpenat2 opens "/" beneath itself with the resolve flags the walkers
// use.
func trialOpenat2() Finding {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Finding{Status: Unknown, Detail: "open \"/\": " + errText(err)}
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, ".", &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return Finding{Status: No, Detail: errText(err)}
	}
	unix.Close(fd)
	return Finding{Status: Yes, Detail: "trial open"}
}

// trialLandlockScope asks the kernel for its Landlock ABI version: scopes
// came with ABI 6.
func trialLandlockScope() Finding {
	abi, err := linux.LandlockABI()
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return Finding{Status: No, Detail: "Landlock not enabled at boot (EOPNOTSUPP): add landlock to the lsm= boot parameter"}
	case err != nil:
		return Finding{Status: No, Detail: "no Landlock in this kernel (" + errText(err) + ")"}
	case abi < 6:
		return Finding{Status: No, Detail: fmt.Sprintf("Landlock ABI %d; scopes need ABI 6, Linux 6.12", abi)}
	}
	return Finding{Status: Yes, Detail: fmt.Sprintf("Landlock ABI %d", abi)}
}

// overlayListed reports whether /proc/filesystems lists overlay.
func overlayListed() (bool, error) {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false, fmt.Errorf("/proc/filesystems: %s", errText(err))
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 0 && fields[len(fields)-1] == "overlay" {
			return true, nil
		}
	}
	return false, nil
}

// setMountItems sets every overlay item that needs a mount to try, except
// Overlay itself, to fd.
func setMountItems(f *Features, fd Finding) {
	setMountItemsFor(f, PinnedOverlayOptions, fd)
}

func setMountItemsFor(f *Features, opts []string, fd Finding) {
	f.OverlayOptions = make([]OptionFinding, len(opts))
	for i, o := range opts {
		f.OverlayOptions[i] = OptionFinding{Option: o, Finding: fd}
	}
	f.OverlayPinned = fd
	f.UserXattr = fd
}

// trialOverlay sets the overlay items of f by trial mounts: a plain mount,
// one per option in opts (each alone), one with all of opts, and one with
// userxattr. The scratch directory is made here, in the caller's mount
// namespace, and removed after the private namespace that mounted on it is
// done.
func trialOverlay(f *Features, opts []string) {
	dir, err := os.MkdirTemp("", "layerseal-probe-")
	if err != nil {
		f.Overlay = Finding{Status: Unknown, Detail: "scratch dir: " + errText(err)}
		setMountItemsFor(f, opts, f.Overlay)
		return
	}
	defer os.Remove(dir)
	onPrivateThread(func() { trialMounts(f, dir, opts) })
}

// onPrivateThread runs fn on a locked OS thread that is never returned to
// the Go scheduler: fn may change the thread's mount namespace and working
// directory, and the thread ends with the goroutine. The main thread is
// never used, because Go keeps it alive after such a goroutine ends and
// /proc/self shows its namespace.
func onPrivateThread(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Holding the main thread here makes the next goroutine run on
			// another one.
			onPrivateThread(fn)
			runtime.UnlockOSThread()
			return
		}
		fn()
	}()
	<-done
}

// trialMounts runs on a private thread: it unshares the mount namespace,
// mounts a tmpfs on dir, and tries each overlay mount there with relative
// paths (so dir needs no escaping in mount options).
func trialMounts(f *Features, dir string, opts []string) {
	fail := func(what string, err error) {
		f.Overlay = Finding{Status: Unknown, Detail: what + ": " + errText(err)}
		setMountItemsFor(f, opts, f.Overlay)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		fail("private mount namespace", err)
		return
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make mounts private", err)
		return
	}
	if err := unix.Mount("layerseal-probe", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=1m"); err != nil {
		fail("scratch tmpfs", err)
		return
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	if err := unix.Chdir(dir); err != nil {
		fail("scratch tmpfs", err)
		return
	}
	defer unix.Chdir("/")
	for _, d := range []string{"lower", "merged"} {
		if err := unix.Mkdir(d, 0o700); err != nil {
			fail("scratch tmpfs", err)
			return
		}
	}
	n := 0
	try := func(extra ...string) Finding {
		n++
		upper, work := fmt.Sprintf("upper%d", n), fmt.Sprintf("work%d", n)
		for _, d := range []string{upper, work} {
			if err := unix.Mkdir(d, 0o700); err != nil {
				return Finding{Status: Unknown, Detail: "scratch tmpfs: " + errText(err)}
			}
		}
		data := "lowerdir=lower,upperdir=" + upper + ",workdir=" + work
		for _, o := range extra {
			data += "," + o
		}
		if err := unix.Mount("overlay", "merged", "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
			return Finding{Status: No, Detail: errText(err)}
		}
		if err := unix.Unmount("merged", 0); err != nil {
			unix.Unmount("merged", unix.MNT_DETACH)
		}
		return Finding{Status: Yes, Detail: "trial mount"}
	}
	if f.Overlay = try(); !f.Overlay.OK() {
		setMountItemsFor(f, opts, Finding{Status: No, Detail: "no overlay"})
		return
	}
	f.OverlayOptions = make([]OptionFinding, len(opts))
	for i, o := range opts {
		f.OverlayOptions[i] = OptionFinding{Option: o, Finding: try(o)}
	}
	f.OverlayPinned = try(opts...)
	f.UserXattr = try("userxattr")
}

// overlayParams reads the overlay module's parameters, and a note saying
// why they are missing or which could not be read.
func overlayParams() (map[string]string, string) {
	ents, err := os.ReadDir(paramsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, "overlay module not loaded"
	}
	if err != nil {
		return map[string]string{}, "read parameters: " + errText(err)
	}
	params := make(map[string]string, len(ents))
	var bad []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(paramsDir, e.Name()))
		if err != nil {
			bad = append(bad, e.Name()+": "+errText(err))
			continue
		}
		params[e.Name()] = strings.TrimSpace(string(b))
	}
	if len(bad) > 0 {
		return params, "unreadable: " + strings.Join(bad, ", ")
	}
	return params, ""
}

// errText is the short form of err: the errno's name when there is one.
func errText(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
	}
	return err.Error()
}
