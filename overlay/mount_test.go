package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/probe"
)

// detected is what the probe finds on the running kernel, tried once per
// test binary; tests derive from it what the kernel must give them.
var detected = sync.OnceValues(probe.Detect)

// kernelFeatures returns the probe's findings. Call it on the test's own
// goroutine: it fails t when the probe cannot run.
func kernelFeatures(t testing.TB) probe.Features {
	t.Helper()
	f, err := detected()
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return f
}

// TestMain narrows pinnedOpts to the pinned options the running kernel
// takes, as Perform would, when privileged tests are on.
func TestMain(m *testing.M) {
	if privtest.Enabled() && os.Geteuid() == 0 {
		f, err := detected()
		if err != nil {
			fmt.Fprintf(os.Stderr, "probe: %v\n", err)
			os.Exit(1)
		}
		pinnedOpts = strings.Join(takenPinned(f), ",")
	}
	os.Exit(m.Run())
}

// takenPinned returns the pinned options the probe found the kernel takes,
// in Pinned order, or all of them when the probe could not try one.
func takenPinned(f probe.Features) []string {
	var taken []string
	for _, o := range Pinned {
		switch f.Option(o).Status {
		case probe.Yes:
			taken = append(taken, o)
		case probe.Unknown:
			return slices.Clone(Pinned)
		}
	}
	return taken
}

// mountIDLines is the summary line of the reason every Read on this
// kernel carries when the probe found no statx mount IDs, or nothing.
func mountIDLines(t testing.TB) []string {
	t.Helper()
	switch fd := kernelFeatures(t).StatxMountID; fd.Status {
	case probe.Yes:
		return nil
	case probe.No:
		return lines("!no-mount-id ")
	default:
		t.Fatalf("probe could not decide statx mount IDs: %+v", fd)
		return nil
	}
}

// checkMounted checks what Perform mounted against the probe's trial
// mounts: every pinned option the kernel takes is used, in Pinned order;
// every one it refuses is missing, and only nfs_export, xino and uuid may
// be; the pinned set was taken whole exactly when nothing is missing.
func checkMounted(f probe.Features, got Mounted) error {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	for _, o := range Pinned {
		fd := f.Option(o)
		used, missing := slices.Contains(got.Options, o), slices.Contains(got.Missing, o)
		key, _, _ := strings.Cut(o, "=")
		switch {
		case fd.Status == probe.Unknown:
			bad("probe could not decide %q: %+v", o, fd)
		case used == missing:
			bad("%q used %v and missing %v", o, used, missing)
		case fd.OK() != used:
			bad("%q used %v, but the probe's trial mount says %+v", o, used, fd)
		case missing && required[key]:
			bad("required option %q missing", o)
		}
	}
	for _, o := range got.Missing {
		if !slices.Contains(Pinned, o) {
			bad("missing %q is not a pinned option", o)
		}
	}
	want := slices.DeleteFunc(slices.Clone(Pinned), func(o string) bool { return slices.Contains(got.Missing, o) })
	if !slices.Equal(got.Options, want) {
		bad("options %q, want %q", got.Options, want)
	}
	if f.OverlayPinned.OK() != (len(got.Missing) == 0) {
		bad("missing %q, but the probe's mount with every pinned option says %+v", got.Missing, f.OverlayPinned)
	}
	if len(problems) > 0 {
		return fmt.Errorf("mounted %+v: %s", got, strings.Join(problems, "; "))
	}
	return nil
}

// TestCheckMounted shows that checkMounted, which the privileged tests
// trust, can fail: for each probe finding, the one right result passes and
// the near misses do not.
func TestCheckMounted(t *testing.T) {
	features := func(refused ...string) probe.Features {
		yes := probe.Finding{Status: probe.Yes, Detail: "trial mount"}
		no := probe.Finding{Status: probe.No, Detail: "EINVAL"}
		f := probe.Features{Overlay: yes, OverlayPinned: yes}
		for _, o := range Pinned {
			fd := yes
			if slices.Contains(refused, o) {
				fd, f.OverlayPinned = no, no
			}
			f.OverlayOptions = append(f.OverlayOptions, probe.OptionFinding{Option: o, Finding: fd})
		}
		return f
	}
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(Pinned), func(o string) bool { return slices.Contains(drop, o) })
	}
	all, noUUID := features(), features("uuid=null")
	unknown := features()
	unknown.OverlayOptions[5].Finding = probe.Finding{Status: probe.Unknown, Detail: "needs root"}
	pinnedNo := features()
	pinnedNo.OverlayPinned = probe.Finding{Status: probe.No, Detail: "EINVAL"}
	for _, c := range []struct {
		name string
		f    probe.Features
		got  Mounted
		ok   bool
	}{
		{"everything taken", all, Mounted{Options: Pinned}, true},
		{"uuid refused and dropped", noUUID, Mounted{Options: without("uuid=null"), Missing: []string{"uuid=null"}}, true},
		{"uuid refused but used", noUUID, Mounted{Options: Pinned}, false},
		{"uuid taken but dropped", all, Mounted{Options: without("uuid=null"), Missing: []string{"uuid=null"}}, false},
		{"option lost without a word", all, Mounted{Options: without("xino=off")}, false},
		{"reordered", all, Mounted{Options: append(without("index=off"), "index=off")}, false},
		{"required option dropped", features("index=off"), Mounted{Options: without("index=off"), Missing: []string{"index=off"}}, false},
		{"stranger missing", all, Mounted{Options: Pinned, Missing: []string{"volatile"}}, false},
		{"probe undecided", unknown, Mounted{Options: Pinned}, false},
		{"pinned set refused with every option taken", pinnedNo, Mounted{Options: Pinned}, false},
	} {
		if err := checkMounted(c.f, c.got); (err == nil) != c.ok {
			t.Errorf("%s: checkMounted = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

func TestTakenPinned(t *testing.T) {
	f := probe.Features{}
	for _, o := range Pinned {
		fd := probe.Finding{Status: probe.Yes, Detail: "trial mount"}
		if o == "uuid=null" || o == "xino=off" {
			fd = probe.Finding{Status: probe.No, Detail: "EINVAL"}
		}
		f.OverlayOptions = append(f.OverlayOptions, probe.OptionFinding{Option: o, Finding: fd})
	}
	want := []string{"redirect_dir=nofollow", "metacopy=off", "index=off", "nfs_export=off"}
	if got := takenPinned(f); !slices.Equal(got, want) {
		t.Errorf("takenPinned = %q, want %q", got, want)
	}
	f.OverlayOptions[0].Finding = probe.Finding{Status: probe.Unknown, Detail: "needs root"}
	if got := takenPinned(f); !slices.Equal(got, Pinned) {
		t.Errorf("takenPinned with an untried option = %q, want all of %q", got, Pinned)
	}
}

// performPinned mounts upper over lower on target as layerseal does
// (NewMount and Perform, which drop the droppable options the kernel
// refuses) and checks the result against f (see checkMounted). It reports
// by error, so it can run inside inMountNS.
func performPinned(f probe.Features, lower, upper, work, target string) (Mounted, error) {
	got, err := NewMount(lower, upper, work, target, false).Perform()
	if err != nil {
		return Mounted{}, fmt.Errorf("mount overlay: %w", err)
	}
	if err := checkMounted(f, got); err != nil {
		unix.Unmount(target, unix.MNT_DETACH)
		return Mounted{}, err
	}
	return got, nil
}

func TestNewMountPinsOptions(t *testing.T) {
	m := NewMount("/w", "/s/upper", "/s/work", "/w", false)
	want := []string{"redirect_dir=nofollow", "metacopy=off", "index=off", "nfs_export=off", "xino=off", "uuid=null"}
	if !slices.Equal(m.Options, want) {
		t.Fatalf("options %q, want %q", m.Options, want)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	u := NewMount("/w", "/s/upper", "/s/work", "/w", true)
	if !slices.Equal(u.Options, append(want, "userxattr")) || !u.Unprivileged {
		t.Fatalf("unprivileged options %q", u.Options)
	}
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	m.Options[0] = "changed"
	if Pinned[0] != "redirect_dir=nofollow" {
		t.Fatal("NewMount shares its options with Pinned")
	}
}

func TestValidateRefuses(t *testing.T) {
	base := NewMount("/w", "/s/upper", "/s/work", "/w", false)
	cases := map[string]func(*Mount){
		"relative lower":      func(m *Mount) { m.Lower = "w" },
		"unclean upper":       func(m *Mount) { m.Upper = "/s/../s/upper" },
		"work in upper":       func(m *Mount) { m.Work = "/s/upper/work" },
		"upper in lower":      func(m *Mount) { m.Upper = "/w/upper" },
		"volatile":            func(m *Mount) { m.Options = append(m.Options, "volatile") },
		"metacopy on":         func(m *Mount) { m.Options[1] = "metacopy=on" },
		"redirect missing":    func(m *Mount) { m.Options = m.Options[1:] },
		"duplicate":           func(m *Mount) { m.Options = append(m.Options, "index=off") },
		"userxattr privilege": func(m *Mount) { m.Options = append(m.Options, "userxattr") },
		"unpriv no userxattr": func(m *Mount) { m.Unprivileged = true },
		"nul":                 func(m *Mount) { m.Target = "/w\x00x" },
	}
	for name, change := range cases {
		m := base
		m.Options = slices.Clone(base.Options)
		change(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, m)
		}
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, p := range []string{"/plain", "/a:b", `/a\b`, "/a,b", `/x\:,y::`} {
		if got := splitLower(escape(p, ":")); len(got) != 1 || got[0] != p {
			t.Errorf("lowerdir %q: split back to %q", p, got)
		}
		if got := unescapeOverlay(escape(p, ",")); got != p {
			t.Errorf("upperdir %q: unescaped back to %q", p, got)
		}
	}
	if got := splitLower("/a:/b"); !slices.Equal(got, []string{"/a", "/b"}) {
		t.Errorf("two layers split as %q", got)
	}
	if got := unescapeOctal(`/a\134:b\054c\040d`); got != `/a\:b,c d` {
		t.Errorf("unescapeOctal gave %q", got)
	}
}

// defaults as this package sees a module with every feature off and
// redirect_always_follow on.
var fixtureDefaults = map[string]string{"redirect_dir": "follow", "index": "off", "metacopy": "off", "nfs_export": "off", "xino": "off", "uuid": "auto"}

func parseFixture(t *testing.T, line string) *mountinfo.Info {
	t.Helper()
	infos, err := mountinfo.GetMountsFromReader(strings.NewReader(line+"\n"), nil)
	if err != nil || len(infos) != 1 {
		t.Fatalf("fixture %q: %v", line, err)
	}
	return infos[0]
}

func TestMatch(t *testing.T) {
	m := NewMount("/ws/a:b,c", "/st/upper", "/st/work", "/ws/a:b,c", false)
	good := `64 42 0:38 / /ws/a:b\054c rw,relatime - overlay overlay rw,lowerdir=/ws/a\134:b\054c,upperdir=/st/upper,workdir=/st/work,redirect_dir=nofollow,uuid=null`
	if err := m.match(parseFixture(t, good), Pinned, fixtureDefaults, true); err != nil {
		t.Fatalf("good entry: %v", err)
	}
	bad := map[string]string{
		"redirect_dir=nofollow": strings.Replace(good, ",redirect_dir=nofollow", "", 1),
		"volatile":              good + ",volatile",
		"metacopy=on":           good + ",metacopy=on",
		"upperdir":              strings.Replace(good, "/st/upper", "/st/other", 1),
		"lowerdir":              strings.Replace(good, `lowerdir=/ws/a\134:b\054c`, `lowerdir=/ws/a:b\054c`, 1),
		"userxattr":             good + ",userxattr",
		"tmpfs":                 strings.Replace(good, "- overlay overlay", "- tmpfs overlay", 1),
	}
	for want, line := range bad {
		err := m.match(parseFixture(t, line), Pinned, fixtureDefaults, true)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("entry %q: error %v, want ErrMismatch naming %q", line, err, want)
		}
	}
	// xino is left out when it has no effect only if the layers share a filesystem.
	auto := map[string]string{}
	for k, v := range fixtureDefaults {
		auto[k] = v
	}
	auto["xino"] = "auto"
	if err := m.match(parseFixture(t, good), Pinned, auto, true); err != nil {
		t.Errorf("xino on one filesystem: %v", err)
	}
	if err := m.match(parseFixture(t, good), Pinned, auto, false); !errors.Is(err, ErrMismatch) {
		t.Errorf("xino default auto across filesystems accepted: %v", err)
	}
	// An option the kernel refused and that was dropped is not required.
	if err := m.match(parseFixture(t, strings.Replace(good, ",uuid=null", "", 1)), Pinned[:5], fixtureDefaults, true); err != nil {
		t.Errorf("without uuid: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	lower, upper, work := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{lower, upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(lower, 0o751); err != nil {
		t.Fatal(err)
	}
	mtime := time.Unix(1_600_000_000, 123456789)
	if err := os.Chtimes(lower, mtime.Add(time.Hour), mtime); err != nil {
		t.Fatal(err)
	}
	m := NewMount(lower, upper, work, lower, false)
	if err := m.prepare(); err != nil {
		t.Fatal(err)
	}
	var lo, up unix.Stat_t
	if err := unix.Stat(lower, &lo); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(upper, &up); err != nil {
		t.Fatal(err)
	}
	if lo.Mode != up.Mode || lo.Uid != up.Uid || lo.Gid != up.Gid || lo.Mtim != up.Mtim || lo.Atim != up.Atim {
		t.Fatalf("upper root %+v differs from lower root %+v", up, lo)
	}
	if err := os.WriteFile(filepath.Join(work, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := m.prepare(); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("non-empty work dir: %v", err)
	}
}

// inMountNS runs f on a thread of its own in a fresh private mount namespace;
// the thread is never returned to the scheduler, so the namespace and its
// mounts go away with it.
func inMountNS(t *testing.T, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPerformPrivileged(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	lower := filepath.Join(dir, "work,space:x")
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{lower, upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower, "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := kernelFeatures(t)
	inMountNS(t, func() error {
		m := NewMount(lower, upper, work, lower, false)
		got, err := m.Perform()
		if err != nil {
			return err
		}
		if err := checkMounted(f, got); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(lower, "new"), []byte("new"), 0o644); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(upper, "new")); err != nil {
			t.Errorf("write did not land in upper: %v", err)
		}
		if err := m.Verify(got.Options); err != nil {
			t.Errorf("Verify after Perform: %v", err)
		}
		other := m
		other.Upper = filepath.Join(dir, "elsewhere")
		if err := other.Verify(got.Options); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "upperdir") {
			t.Errorf("Verify with another upper dir: %v", err)
		}
		return unix.Unmount(lower, 0)
	})
	if _, err := os.Stat(filepath.Join(lower, "new")); !os.IsNotExist(err) {
		t.Errorf("write reached the lower dir: %v", err)
	}
}

func TestVerifyDetectsDefaultsPrivileged(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	lower, upper, work := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{lower, upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	inMountNS(t, func() error {
		// Mounted without the pinned options: the kernel's defaults apply.
		data := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",volatile"
		if err := unix.Mount("overlay", lower, "overlay", 0, data); err != nil {
			return err
		}
		m := NewMount(lower, upper, work, lower, false)
		err := m.Verify(Pinned)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "volatile overlays") || !strings.Contains(err.Error(), `"redirect_dir=nofollow"`) {
			t.Errorf("Verify of a volatile mount: %v", err)
		}
		return unix.Unmount(lower, 0)
	})
}
