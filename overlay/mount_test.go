package overlay

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

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
	inMountNS(t, func() error {
		m := NewMount(lower, upper, work, lower, false)
		got, err := m.Perform()
		if err != nil {
			return err
		}
		if !slices.Equal(got.Options, Pinned) || len(got.Missing) != 0 {
			t.Errorf("mounted %+v, want all of %q", got, Pinned)
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
