package nsrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

func TestDescribeMinimal(t *testing.T) {
	m := minimal{Root: "/tmp", Workspace: "/home/u/ws", ReadOnly: []string{"/data", "/srv/ref"}, Writable: []string{"/data/out"},
		Secrets: []string{"/etc/shadow"}, Follow: []string{"/run/systemd/resolve/stub-resolv.conf"}, Home: "/root", UID: 1000, GID: 100,
		Terminal: "/dev/pts/3"}
	v := describeMinimal(m)
	if s := v.Steps[0]; s.Op != opNewRoot || s.Target != "/tmp" {
		t.Fatalf("first step %+v, want the new root on /tmp", s)
	}
	switchAt := slices.IndexFunc(v.Steps, func(s viewStep) bool { return s.Op == opSwitchRoot })
	if switchAt != len(v.Steps)-2 || v.Steps[switchAt].Target != "/tmp" {
		t.Fatalf("switch of root at step %d of %d", switchAt, len(v.Steps))
	}
	if s := v.Steps[len(v.Steps)-1]; s.Op != opRemount || s.Target != "/" || s.Flags&unix.MS_RDONLY == 0 {
		t.Errorf("last step %+v, want the root made read-only", s)
	}
	// The host paths the view holds are exactly these.
	want := append(SystemDirs(), "/sys", "/dev/pts/3", "/data", "/srv/ref", "/data/out", "/home/u/ws",
		"/run/systemd/resolve/stub-resolv.conf")
	for _, d := range Devices {
		want = append(want, "/dev/"+d)
	}
	var held, order []string
	for i, s := range v.Steps {
		for _, x := range []*viewStep{&s, s.Fallback} {
			if x != nil && x.Held {
				held = append(held, x.Source)
			}
		}
		if s.Op == opPrivateTmp || s.Op == opReadOnlyHost {
			t.Errorf("step %+v shows the host's %s", s, s.Target)
		}
		if s.Writable && (s.Flags&unix.MS_NODEV == 0 || s.Flags&unix.MS_RDONLY != 0) {
			t.Errorf("writable step %+v: want nodev and not read-only", s)
		}
		if (s.Op == opBind || s.Op == opMirror) && s.Held && !s.Writable && !strings.HasPrefix(s.Target, "/dev/") {
			if s.Flags&unix.MS_RDONLY == 0 || !s.Listed {
				t.Errorf("read-only bind %+v: want read-only, listed", s)
			}
			if s.Source != "/run/systemd/resolve/stub-resolv.conf" && !s.ReadOnlyTree {
				t.Errorf("read-only bind %+v: want the mounts under it read-only", s)
			}
		}
		if s.Op == opBind && s.Held && s.Source == s.Target && !strings.HasPrefix(s.Target, "/dev/") && s.Source != "/sys" {
			order = append(order, s.Target)
			for _, later := range v.Steps[i+1:] {
				if later.Op == opMount && attest.Within(s.Target, later.Target) {
					t.Errorf("fresh mount on %q after the bind of %q would cover it", later.Target, s.Target)
				}
			}
		}
	}
	slices.Sort(held)
	slices.Sort(want)
	if !slices.Equal(slices.Compact(held), want) {
		t.Errorf("host sources %q, want %q", held, want)
	}
	if got := strings.Join(order, " "); got != "/run/systemd/resolve/stub-resolv.conf /data /data/out /srv/ref /home/u/ws" {
		t.Errorf("binds in the order %q", got)
	}
	tmpfs := map[string]string{}
	for _, s := range v.Steps {
		if s.Op == opMount && s.FSType == "tmpfs" {
			tmpfs[s.Target] = s.Data
		}
	}
	for p, data := range map[string]string{"/tmp": "mode=1777", "/var/tmp": "mode=1777", "/run": "mode=0755",
		"/root": "mode=0700,uid=1000,gid=100"} {
		if tmpfs[p] != data {
			t.Errorf("tmpfs on %q: %q, want %q", p, tmpfs[p], data)
		}
	}
	etc := slices.IndexFunc(v.Steps, func(s viewStep) bool { return s.Op == opMirror && s.Source == "/etc" })
	mask := slices.IndexFunc(v.Steps, func(s viewStep) bool { return s.Op == opMask && s.Target == "/etc/shadow" })
	if etc < 0 || mask < etc {
		t.Errorf("/etc bound at step %d, its shadow masked at %d", etc, mask)
	}
}

func TestMinimalHome(t *testing.T) {
	cfg := &Config{Workspace: "/home/u/ws", Process: specs.Process{User: specs.User{UID: 0}}}
	for _, c := range []struct {
		env      []string
		ro, rw   []string
		uid      uint32
		wantHome string
	}{
		{env: nil, uid: 0, wantHome: "/root"},
		{env: nil, uid: 1000, wantHome: ""}, // DefaultEnv: HOME=/
		{env: []string{"HOME=/home/u"}, uid: 1000, wantHome: "/home/u"},
		{env: []string{"HOME=/home/u/ws"}, wantHome: ""},
		{env: []string{"HOME=/home/u/ws/sub"}, wantHome: ""},
		{env: []string{"HOME=/data/h"}, ro: []string{"/data"}, wantHome: ""},
		{env: []string{"HOME=/data"}, rw: []string{"/data"}, wantHome: ""},
		{env: []string{"HOME=relative"}, wantHome: ""},
		{env: []string{"HOME=/proc/x"}, wantHome: ""},
	} {
		cfg.Process.Env, cfg.Process.User.UID = c.env, c.uid
		m := minimalFor(cfg, Sandbox{ReadOnly: c.ro, Writable: c.rw}, "", nil)
		if m.Home != c.wantHome {
			t.Errorf("HOME from %q (ro %q, rw %q, uid %d): %q, want %q", c.env, c.ro, c.rw, c.uid, m.Home, c.wantHome)
		}
	}
}

func TestEtcSecrets(t *testing.T) {
	etc := t.TempDir()
	for name, mode := range map[string]os.FileMode{
		"shadow": 0o640, "passwd": 0o644, "hosts": 0o644, "odd.conf": 0o600, "sudoers": 0o444,
		"ssh/ssh_host_ed25519_key": 0o600, "ssh/ssh_host_ed25519_key.pub": 0o644, "ssh/ssh_config": 0o644,
		"ssl/private/snakeoil.key": 0o640, "ssl/certs/ca.pem": 0o644, "sudoers.d/README": 0o444,
	} {
		p := filepath.Join(etc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(etc, "ssl/private"), 0o710); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("shadow", filepath.Join(etc, "link")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range etcSecrets(etc) {
		got = append(got, strings.TrimPrefix(p, etc+"/"))
	}
	want := []string{"odd.conf", "shadow", "ssh/ssh_host_ed25519_key", "ssl/private", "sudoers", "sudoers.d"}
	if !slices.Equal(got, want) {
		t.Errorf("masked %q, want %q", got, want)
	}
}

func TestCheckReadOnly(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	ws, state, ro := filepath.Join(home, "ws"), filepath.Join(dir, "state"), filepath.Join(dir, "ro")
	for _, d := range []string{home, ws, state, ro, filepath.Join(ws, "sub"), filepath.Join(state, "x")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ro, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	reserved := map[string]string{state: "state dir"}
	// A link resolves; a directory holding the workspace may be read.
	got, err := CheckReadOnly([]string{filepath.Join(dir, "link"), home}, ws, reserved)
	if err != nil || !slices.Equal(got, []string{ro, home}) {
		t.Errorf("read-only paths: %q, %v", got, err)
	}
	for _, bad := range []string{"", "a\x00b", filepath.Join(dir, "missing"), ws, filepath.Join(ws, "sub"), dir, state,
		filepath.Join(state, "x"), "/", "/proc/self", "/sys/kernel", "/dev/null"} {
		_, err := CheckReadOnly([]string{bad}, ws, reserved)
		if !errors.Is(err, ErrReadOnlyPath) || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("%q: %v, want ErrReadOnlyPath naming it", bad, err)
		} else {
			t.Logf("%q: %v", bad, err)
		}
	}
}

// TestMoveRoot is switchRoot's fallback where pivot_root is refused (an
// initramfs root), tried on any kernel in a private mount namespace of one
// thread: the new root moved over the old one becomes the thread's root,
// ".." does not lead out of it, the old root's mounts are out of reach;
// and another thread of that namespace whose root is the old one (as the
// agent stage's is) enters the new root with enterMovedRoot.
func TestMoveRoot(t *testing.T) {
	privtest.Require(t)
	mp := t.TempDir()
	check := func(errs *[]error) {
		if b, err := os.ReadFile("/marker"); err != nil || string(b) != "new root\n" {
			*errs = append(*errs, fmt.Errorf("/marker: %q, %v", b, err))
		}
		if err := unix.Chdir("/../.."); err != nil {
			*errs = append(*errs, err)
		} else if _, err := os.Stat("marker"); err != nil {
			*errs = append(*errs, fmt.Errorf(`".." led out of the new root: %v`, err))
		}
		if _, err := os.Stat("/proc/self"); err == nil {
			*errs = append(*errs, errors.New("the old root's /proc is reachable"))
		}
	}
	// Each thread stays locked and so ends with its goroutine, taking its
	// mount namespace and root along; both stay until the test is done.
	release := make(chan struct{})
	defer close(release)
	nsc, joined, moved, entered := make(chan *os.File, 1), make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { // the thread that moves the root, as init does
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Mount("layerseal-root", mp, "tmpfs", 0, "mode=0755")
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(mp, "marker"), []byte("new root\n"), 0o644)
		}
		var ns *os.File
		if err == nil {
			ns, err = os.Open("/proc/thread-self/ns/mnt")
		}
		if err != nil {
			moved <- err
			close(nsc)
			return
		}
		nsc <- ns
		if err := <-joined; err != nil {
			moved <- err
			return
		}
		err = unix.Chdir(mp)
		if err == nil {
			err = moveRoot()
		}
		var errs []error
		if err == nil {
			check(&errs)
		}
		moved <- errors.Join(append(errs, err)...)
		<-release
	}()
	go func() { // a thread whose root is the old one, as the agent stage's is
		runtime.LockOSThread()
		ns := <-nsc
		if ns == nil {
			return
		}
		defer ns.Close()
		err := unix.Unshare(unix.CLONE_FS)
		if err == nil {
			err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS)
		}
		joined <- err
		if err != nil {
			entered <- fmt.Errorf("join the namespace: %w", err)
			return
		}
		if err := <-moved; err != nil {
			entered <- fmt.Errorf("move: %w", err)
			return
		}
		var errs []error
		if _, err := os.Stat("/marker"); err == nil {
			errs = append(errs, errors.New("the old root shows the new root before enterMovedRoot"))
		}
		err = enterMovedRoot()
		if err == nil {
			check(&errs)
		}
		entered <- errors.Join(append(errs, err)...)
		<-release
	}()
	if err := <-entered; err != nil {
		t.Fatal(err)
	}
}
