//go:build linux

package probe

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/internal/privtest"
	"golang.org/x/sys/unix"
)

// TestDetectWithoutMounts runs the trials that need no privilege and checks
// that the mount-based items read as unknown, never as no.
func TestDetectWithoutMounts(t *testing.T) {
	f := detect(false)
	if f.KernelRelease == "" {
		t.Error("no kernel release")
	}
	for name, fd := range map[string]Finding{"statx_mnt_id": f.StatxMountID, "statx_mnt_id_unique": f.StatxMountIDUnique, "openat2": f.Openat2} {
		if fd.Status == Unknown || fd.Detail == "" {
			t.Errorf("%s = %+v, want a tried yes or no with a detail", name, fd)
		}
	}
	needsRoot := Finding{Status: Unknown, Detail: "needs root"}
	if f.OverlayPinned != needsRoot || f.UserXattr != needsRoot {
		t.Errorf("pinned %+v, userxattr %+v: want %+v", f.OverlayPinned, f.UserXattr, needsRoot)
	}
	if len(f.OverlayOptions) != len(PinnedOverlayOptions) {
		t.Fatalf("%d option findings, want %d", len(f.OverlayOptions), len(PinnedOverlayOptions))
	}
	for i, o := range f.OverlayOptions {
		if o.Option != PinnedOverlayOptions[i] || o.Finding != needsRoot {
			t.Errorf("option %d = %+v, want %s %+v", i, o, PinnedOverlayOptions[i], needsRoot)
		}
	}
	if f.Overlay.Status == No {
		t.Errorf("overlay = %+v: without a trial mount it is yes or unknown", f.Overlay)
	}
	if f.OverlayParams == nil {
		t.Error("OverlayParams is nil")
	}
}

func TestDetectRejectsUnknownSimulation(t *testing.T) {
	t.Setenv(SimulateEnv, "no-openat2,no-such-thing")
	if _, err := Detect(); err == nil {
		t.Fatal("Detect accepted an unknown simulation")
	}
}

// scratch points os.TempDir at a fresh directory and returns it, so a test
// can check that Detect leaves nothing behind.
func scratch(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return dir
}

// checkNoLeftovers fails t if dir is not empty or anything is mounted under
// it in the test's mount namespace.
func checkNoLeftovers(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind in the scratch dir: %q", e.Name())
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, dir) || strings.Contains(l, "layerseal-probe") {
			t.Errorf("mount left behind: %s", l)
		}
	}
}

// everyKernel are the overlay options every kernel layerseal supports
// (Linux 5.10 and later) takes; uuid=null (Linux 6.6) is not among them.
var everyKernel = []string{"redirect_dir=nofollow", "metacopy=off", "index=off", "nfs_export=off", "xino=off"}

// statxTrial says whether statx itself works here: a kernel before 4.11
// (or a seccomp filter, as in the kernel tests) refuses it with ENOSYS.
// It is tried here, apart from the probe, with another path and mask.
func statxTrial(t *testing.T) bool {
	t.Helper()
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, t.TempDir(), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st)
	if errors.Is(err, unix.ENOSYS) {
		return false
	}
	if err != nil {
		t.Fatalf("statx: %v", err)
	}
	return true
}

// checkDecided fails t for each item of f that the probe, run as root,
// left undecided, and for findings that contradict one another: the
// pinned set is taken exactly when each pinned option is; unique mount IDs
// come only with mount IDs; every item besides overlay needs overlay.
func checkDecided(t *testing.T, f Features) {
	t.Helper()
	for item, fd := range items(f) {
		if fd.Status != Yes && fd.Status != No || fd.Detail == "" {
			t.Errorf("%s = %+v, want a decided yes or no with a detail", item, fd)
		}
	}
	every := true
	for _, o := range PinnedOverlayOptions {
		every = every && f.Option(o).OK()
	}
	if f.OverlayPinned.OK() != every {
		t.Errorf("pinned set %+v, but each option alone: %+v", f.OverlayPinned, f.OverlayOptions)
	}
	if f.StatxMountIDUnique.OK() && !f.StatxMountID.OK() {
		t.Errorf("unique mount IDs %+v without mount IDs %+v", f.StatxMountIDUnique, f.StatxMountID)
	}
	if !f.Overlay.OK() && (f.UserXattr.OK() || f.OverlayPinned.OK()) {
		t.Errorf("overlay %+v, yet userxattr %+v and pinned set %+v", f.Overlay, f.UserXattr, f.OverlayPinned)
	}
}

// TestDetectPrivileged checks that the probe finds on this kernel what
// every supported kernel (Linux 5.10 or later, with overlay) offers, and
// decides the rest by trial, consistently: statx mount IDs (unless statx
// itself is refused), openat2, overlay and the pinned options but uuid=null
// are yes; unique mount IDs, uuid=null, the pinned set and userxattr are a
// consistent yes or no.
func TestDetectPrivileged(t *testing.T) {
	privtest.Require(t)
	t.Setenv(SimulateEnv, "")
	hasStatx := statxTrial(t)
	dir := scratch(t)
	f, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeftovers(t, dir)
	checkDecided(t, f)
	if hasStatx {
		if !f.StatxMountID.OK() {
			t.Errorf("statx_mnt_id = %+v, want yes", f.StatxMountID)
		}
	} else {
		noStatx := Finding{Status: No, Detail: "statx: ENOSYS"}
		if f.StatxMountID != noStatx || f.StatxMountIDUnique != noStatx {
			t.Errorf("statx refused, yet statx_mnt_id %+v, statx_mnt_id_unique %+v; want %+v", f.StatxMountID, f.StatxMountIDUnique, noStatx)
		}
	}
	for item, fd := range map[string]Finding{"openat2": f.Openat2, "overlay": f.Overlay} {
		if !fd.OK() {
			t.Errorf("%s = %+v, want yes", item, fd)
		}
	}
	if f.Overlay.Detail != "trial mount" {
		t.Errorf("overlay found by %q, want a trial mount", f.Overlay.Detail)
	}
	for _, o := range everyKernel {
		if fd := f.Option(o); fd != (Finding{Status: Yes, Detail: "trial mount"}) {
			t.Errorf("option %s = %+v, want yes by trial mount", o, fd)
		}
	}
	for _, o := range f.OverlayOptions {
		if !o.OK() && o.Detail != "EINVAL" {
			t.Errorf("option %s refused with %q, want EINVAL", o.Option, o.Detail)
		}
	}
	if _, ok := f.OverlayParams["redirect_dir"]; !ok || f.OverlayParamsNote != "" {
		t.Errorf("overlay params %q (note %q): want redirect_dir among them", f.OverlayParams, f.OverlayParamsNote)
	}
	if len(f.Simulated) != 0 {
		t.Errorf("Simulated = %q with %s empty", f.Simulated, SimulateEnv)
	}
}

// TestDetectSimulatedPrivileged checks that simulations remove exactly
// what they name from the kernel's own findings and leave the rest as found.
func TestDetectSimulatedPrivileged(t *testing.T) {
	privtest.Require(t)
	t.Setenv(SimulateEnv, "")
	real, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(SimulateEnv, "no-statx-mnt-id, no-option:uuid=null")
	dir := scratch(t)
	f, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeftovers(t, dir)
	if want := []string{"no-statx-mnt-id", "no-option:uuid=null"}; !slices.Equal(f.Simulated, want) {
		t.Errorf("Simulated = %q, want %q", f.Simulated, want)
	}
	absent := []string{"statx_mnt_id", "statx_mnt_id_unique", "option uuid=null", "overlay_pinned"}
	found := items(real)
	for item, fd := range items(f) {
		switch {
		case slices.Contains(absent, item):
			if fd.Status != No || !strings.HasPrefix(fd.Detail, "simulated: ") {
				t.Errorf("%s = %+v, want no (simulated)", item, fd)
			}
		case fd != found[item]:
			t.Errorf("%s = %+v, but without simulations %+v", item, fd, found[item])
		}
	}
	if len(items(f)) != len(found) {
		t.Errorf("%d items simulated, %d found", len(items(f)), len(found))
	}
}

// TestTrialRejectsBadOptions checks that the trial mounts can say no: the
// kernel refuses options it does not know or values it does not take.
func TestTrialRejectsBadOptions(t *testing.T) {
	privtest.Require(t)
	dir := scratch(t)
	var f Features
	trialOverlay(&f, []string{"index=off", "no_such_option=on", "redirect_dir=sideways"})
	checkNoLeftovers(t, dir)
	if !f.Overlay.OK() {
		t.Fatalf("overlay %+v: want yes", f.Overlay)
	}
	// userxattr came with Linux 5.11: either answer, but an answer.
	if f.UserXattr.Status != Yes && f.UserXattr != (Finding{Status: No, Detail: "EINVAL"}) {
		t.Errorf("userxattr %+v: want yes, or no (EINVAL)", f.UserXattr)
	}
	want := map[string]Finding{
		"index=off":             {Status: Yes, Detail: "trial mount"},
		"no_such_option=on":     {Status: No, Detail: "EINVAL"},
		"redirect_dir=sideways": {Status: No, Detail: "EINVAL"},
	}
	for opt, fd := range want {
		if got := f.Option(opt); got != fd {
			t.Errorf("option %s = %+v, want %+v", opt, got, fd)
		}
	}
	if f.OverlayPinned != (Finding{Status: No, Detail: "EINVAL"}) {
		t.Errorf("all options together = %+v, want no (EINVAL)", f.OverlayPinned)
	}
}

// TestPrivateThread checks that a mount namespace made inside onPrivateThread
// stays there: the calling process keeps its own, and the thread that held
// the private one ends.
func TestPrivateThread(t *testing.T) {
	privtest.Require(t)
	before, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	var tid int
	var inside string
	onPrivateThread(func() {
		tid = unix.Gettid()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		inside, _ = os.Readlink("/proc/thread-self/ns/mnt")
	})
	if tid == os.Getpid() {
		t.Error("ran on the main thread")
	}
	if inside == "" || inside == before {
		t.Errorf("mount namespace inside %q, outside %q: want a new one", inside, before)
	}
	if after, _ := os.Readlink("/proc/self/ns/mnt"); after != before {
		t.Errorf("process mount namespace changed from %q to %q", before, after)
	}
	task := "/proc/self/task/" + strconv.Itoa(tid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still exists after its goroutine ended", tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
