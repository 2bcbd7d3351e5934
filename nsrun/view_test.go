package nsrun

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// containerCaps is Docker's container capability set without CAP_SYS_ADMIN (a
// superset of what a root agent keeps by default).
var containerCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// rootAgent makes cfg's agent root with the container capability set and
// no_new_privs.
func rootAgent(cfg Config) Config {
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: containerCaps, Effective: containerCaps, Permitted: containerCaps}
	cfg.Process.NoNewPrivileges = true
	return cfg
}

func TestDescribeView(t *testing.T) {
	v := describeView("/home/u/ws", []string{"/tmp/state", "/var/lib/layerseal"}, []string{"/home/u/.cache", "/tmp/shared"}, "/dev/pts/3")
	roHost := -1
	var binds []string
	for i, s := range v.Steps {
		if s.Op == opReadOnlyHost {
			roHost = i
		}
		if s.Writable {
			if s.Flags&unix.MS_NODEV == 0 || s.Flags&unix.MS_RDONLY != 0 {
				t.Errorf("writable step %+v: want nodev and not read-only", s)
			}
			if roHost < 0 || roHost > i {
				t.Errorf("writable step %+v comes before the host is made read-only", s)
			}
		}
		if s.Op == opBind && s.Writable {
			if !s.Held || !s.Keep || !s.Create || s.Source != s.Target {
				t.Errorf("writable bind %+v: want held, kept flags, created target, onto itself", s)
			}
			binds = append(binds, s.Target)
			for _, tmp := range v.Steps[i+1:] {
				if tmp.Op == opMount && attest.Within(s.Target, tmp.Target) {
					t.Errorf("fresh mount on %q after the bind of %q would cover it", tmp.Target, s.Target)
				}
			}
		}
	}
	if got := strings.Join(binds, " "); got != "/home/u/.cache /tmp/shared /home/u/ws" {
		t.Errorf("writable binds %q", got)
	}
	for _, tmp := range PrivateTmp {
		found := false
		for _, s := range v.Steps {
			found = found || s.Op == opPrivateTmp && s.Target == tmp && s.Source == tmp && s.Held && s.Writable
		}
		if !found {
			t.Errorf("no private %q", tmp)
		}
	}
	// The hidden path under /tmp is covered again after the private /tmp.
	var remasked []string
	tmpDone := false
	for _, s := range v.Steps {
		tmpDone = tmpDone || s.Op == opPrivateTmp && s.Target == "/tmp"
		if s.Op == opMask && !strings.HasPrefix(s.Target, "/proc/") && !strings.HasPrefix(s.Target, "/sys/") {
			if !tmpDone {
				t.Errorf("mask of %q before the private /tmp", s.Target)
			}
			remasked = append(remasked, s.Target)
		}
	}
	if strings.Join(remasked, " ") != "/tmp/state" {
		t.Errorf("hidden paths covered again: %q, want /tmp/state", remasked)
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	ws, state, rw := filepath.Join(dir, "ws"), filepath.Join(dir, "state"), filepath.Join(dir, "rw")
	for _, d := range []string{ws, state, rw, filepath.Join(ws, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(rw, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	reserved := map[string]string{state: "state dir"}
	got, err := CheckWritable([]string{filepath.Join(dir, "link")}, ws, reserved)
	if err != nil || len(got) != 1 || got[0] != rw {
		t.Errorf("link to rw: %q, %v", got, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), ws, filepath.Join(ws, "sub"), dir, state,
		filepath.Join(state, "x"), "/", "/proc/sys", "/dev"} {
		if bad == filepath.Join(state, "x") {
			if err := os.Mkdir(bad, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := CheckWritable([]string{bad}, ws, reserved); !errors.Is(err, ErrWritable) {
			t.Errorf("%q: %v, want ErrWritable", bad, err)
		} else {
			t.Logf("%q: %v", bad, err)
		}
	}
}

// TestHostileHostReadOnly: in the host view, a root agent (container
// capabilities) cannot write the host outside the workspace, its private
// /tmp and --rw paths.
func TestHostileHostReadOnly(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	shared := t.TempDir()
	// Places a root agent would plant something that runs later; those whose
	// directory this host lacks (a minimal guest) are left out, "/" never.
	var targets []string
	for _, p := range []string{"/etc/layerseal-pwned", "/root/layerseal-pwned", "/usr/local/bin/layerseal-pwned",
		"/var/layerseal-pwned", "/layerseal-pwned"} {
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			t.Logf("no %s here: %q left out", filepath.Dir(p), p)
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%q exists before the test", p)
		}
		targets = append(targets, p)
	}
	hostTmp := "/tmp/layerseal-private-" + filepath.Base(e.ws) + filepath.Base(shared)
	t.Cleanup(func() {
		for _, p := range append(targets, hostTmp) {
			os.Remove(p)
		}
	})
	// Unix sockets of the host's in /tmp and /run: a daemon listening there
	// would take orders from the agent.
	socks := []string{filepath.Join(shared, "..", "host.sock")}
	if fi, err := os.Stat("/run"); err == nil && fi.IsDir() {
		socks = append(socks, fmt.Sprintf("/run/layerseal-test-%d.sock", os.Getpid()))
	} else {
		t.Logf("no /run here (%v): only the socket in /tmp is tried", err)
	}
	for i, p := range socks {
		socks[i] = filepath.Clean(p)
		l, err := net.Listen("unix", socks[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := connectEnv + `=1 ` + self + ` ` + strings.Join(socks, " ") + `
for p in ` + strings.Join(targets, " ") + `; do echo x 2>&1 >"$p" | grep -q 'Read-only file system' && echo "refused $p"; done
echo x > ` + hostTmp + ` && echo tmp-ok
stat -c '%a %n' /tmp /dev/shm
t=$(mktemp) && echo y > "$t" && cp "$t" "$t.2" && cat "$t.2" && rm "$t" "$t.2"
echo shared > ` + shared + `/file && echo rw-ok
echo ws > new && echo ws-ok
echo x > ` + filepath.Dir(shared) + `/outside-rw 2>/dev/null; true`
	cfg := rootAgent(sh(e, script))
	cfg.Sandbox.Writable = []string{shared}
	cfg.Sandbox.View = ViewHost
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run, err := Start(cfg, nil, w, agentStderr(t))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := run.Ready()
	if err != nil {
		t.Fatal(err)
	}
	if !ready.Sandbox.ReadOnlyHost || len(ready.Sandbox.Missing) != 0 || len(ready.Sandbox.Writable) != 1 || ready.Sandbox.Writable[0] != shared {
		t.Errorf("sandbox %+v: want a read-only host, writable %q, nothing missing", ready.Sandbox, shared)
	}
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	outb := make([]byte, 4096)
	n, _ := readAll(r, outb)
	res, err := run.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: %+v, %v", res, err)
	}
	want := ""
	for _, p := range socks {
		want += "refused " + p + "\n"
	}
	for _, p := range targets {
		want += "refused " + p + "\n"
	}
	want += "tmp-ok\n1777 /tmp\n1777 /dev/shm\ny\nrw-ok\nws-ok\n"
	if got := string(outb[:n]); got != want {
		t.Errorf("agent printed\n%s\nwant\n%s", got, want)
	}
	for _, p := range append(targets, hostTmp, filepath.Join(filepath.Dir(shared), "outside-rw")) {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q on the host: %v", p, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(shared, "file")); err != nil || string(b) != "shared\n" {
		t.Errorf("write to the --rw path: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.upper, "new")); err != nil || string(b) != "ws\n" {
		t.Errorf("workspace write: %q, %v", b, err)
	}
}

// TestRemountEachReadOnly is the fallback for kernels without
// mount_setattr(2), tried here on any kernel: in a private mount namespace
// of one thread, every mount point becomes read-only.
func TestRemountEachReadOnly(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	// The temp dir's mount, and the root's and /etc's where this host has
	// them (a minimal guest has no /var).
	targets := []string{filepath.Join(dir, "x"), "/layerseal-pwned"}
	for _, p := range []string{"/etc/layerseal-pwned", "/var/layerseal-pwned"} {
		if _, err := os.Stat(filepath.Dir(p)); err == nil {
			targets = append(targets, p)
		}
	}
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked and so ends with the goroutine, taking its
		// mount namespace along.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- err
			return
		}
		if err := remountEachReadOnly(); err != nil {
			errc <- err
			return
		}
		var errs []error
		for _, p := range targets {
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
				os.Remove(p)
			}
			if !errors.Is(err, unix.EROFS) {
				errs = append(errs, fmt.Errorf("create %q: %v, want EROFS", p, err))
			}
		}
		errc <- errors.Join(errs...)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	// The host itself is untouched.
	if err := os.WriteFile(filepath.Join(dir, "y"), nil, 0o644); err != nil {
		t.Fatalf("host lost write access: %v", err)
	}
}

// TestHostileProc: attack 5. A root agent cannot set the host's core_pattern
// (nor any sysctl), and runc's masked paths read empty.
func TestHostileProc(t *testing.T) {
	privtest.Require(t)
	const corePattern = "/proc/sys/kernel/core_pattern"
	saved, err := os.ReadFile(corePattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if now, err := os.ReadFile(corePattern); err == nil && string(now) != string(saved) {
			if err := os.WriteFile(corePattern, saved, 0o644); err != nil {
				t.Errorf("restore the host's core_pattern %q: %v", saved, err)
			}
			t.Errorf("the agent changed the host's core_pattern to %q (restored)", now)
		}
	})
	e := newEnv(t)
	script := `echo '|/tmp/handler %p' 2>&1 > ` + corePattern + ` | grep -q 'Read-only file system' && echo core-refused
v=$(cat /proc/sys/kernel/core_uses_pid); echo "$v" 2>&1 > /proc/sys/kernel/core_uses_pid | grep -q 'Read-only file system' && echo sysctl-refused
for p in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do [ -e $p ] || continue; [ -s $p ] || [ -n "$(head -c1 $p 2>/dev/null)" ] && echo "readable $p"; done
grep -q ' /proc/sys .*ro,' /proc/self/mountinfo && echo sys-ro
echo done`
	res, out, err := launch(t, rootAgent(sh(e, script)))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: %+v, %v", res, err)
	}
	if out != "core-refused\nsysctl-refused\nsys-ro\ndone\n" {
		t.Errorf("agent printed %q", out)
	}
	if now, err := os.ReadFile(corePattern); err != nil || string(now) != string(saved) {
		t.Errorf("core_pattern on the host: %q, %v; want %q", now, err, saved)
	}
}

// TestHostileSys: attack 4's first step and /sys in general. A root agent
// cannot make a cgroup (v1 freezer or v2) nor write anywhere under /sys.
func TestHostileSys(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	script := `for d in /sys/fs/cgroup/freezer/layerseal-x /sys/fs/cgroup/layerseal-x /sys/fs/cgroup/unified/layerseal-x; do mkdir $d 2>/dev/null && echo "made $d"; done
for f in /sys/kernel/uevent_helper /sys/fs/cgroup/cgroup.subtree_control /sys/fs/cgroup/cgroup.procs /sys/class/net/lo/mtu; do [ -e $f ] || continue; (echo 1 > $f) 2>/dev/null && echo "wrote $f"; done
grep -E ' /sys(/fs/cgroup)? ' /proc/self/mountinfo | grep -v ' ro,' ; echo done`
	res, out, err := launch(t, rootAgent(sh(e, script)))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: %+v, %v", res, err)
	}
	if out != "done\n" {
		t.Errorf("agent printed %q", out)
	}
	for _, d := range []string{"/sys/fs/cgroup/freezer/layerseal-x", "/sys/fs/cgroup/unified/layerseal-x", "/sys/fs/cgroup/layerseal-x"} {
		if _, err := os.Lstat(d); err == nil {
			os.Remove(d)
			t.Errorf("%q was made on the host", d)
		}
	}
}

// blockWorkspace returns a directory on a filesystem backed by a block
// device, and that device's number: a loop-mounted ext4 image where mke2fs
// and losetup exist, else the test's temporary dir when it lies on a block
// device (the kernel-test guests' scratch disk).
func blockWorkspace(t *testing.T) (string, uint64) {
	t.Helper()
	dir := t.TempDir()
	mnt, dev, loopErr := loopExt4(t, dir)
	if loopErr == nil {
		return mnt, dev
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if _, err := os.Stat(sys); err != nil {
		t.Fatalf("no loop-mounted ext4 (%v), and %s is not on a block device (%v): cannot stage attack 6", loopErr, dir, err)
	}
	t.Logf("no loop-mounted ext4 (%v): workspace on %s's own block device %d:%d", loopErr, dir, unix.Major(st.Dev), unix.Minor(st.Dev))
	return dir, st.Dev
}

// loopExt4 makes a 32 MiB ext4 image in dir, attaches it to a loop device
// and mounts it; cleanups undo each step. It returns the mount point and the
// loop device's number.
func loopExt4(t *testing.T, dir string) (string, uint64, error) {
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", 0, err
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return "", 0, err
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		return "", 0, err
	}
	if out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", img).CombinedOutput(); err != nil {
		return "", 0, fmt.Errorf("mke2fs: %w: %s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		return "", 0, fmt.Errorf("losetup: %w", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(loop, &st); err != nil {
		return "", 0, err
	}
	if err := unix.Mount(loop, mnt, "ext4", 0, ""); err != nil {
		return "", 0, fmt.Errorf("mount %s: %w", loop, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	t.Logf("workspace on %s (%d:%d)", loop, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	return mnt, st.Rdev, nil
}

// TestHostileBlockDevice: attack 6. With the workspace on a block device, a
// root agent holding CAP_MKNOD finds no block device in /dev, and a block
// device node it makes in the workspace, /tmp or /dev/shm does not open
// (every writable mount is nodev; /dev is read-only). The host's nodes bound
// into /dev work but cannot be chmodded or chowned (tried with their own
// mode and owner, so that a failure changes nothing on the host).
func TestHostileBlockDevice(t *testing.T) {
	privtest.Require(t)
	root, dev := blockWorkspace(t)
	e := env{ws: filepath.Join(root, "ws"), state: filepath.Join(root, "state")}
	e.upper, e.work, e.key = filepath.Join(e.state, "upper"), filepath.Join(e.state, "work"), filepath.Join(e.state, "key")
	for _, d := range []string{e.ws, e.state, e.upper, e.work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(e.ws, ".env"), []byte("SECRET=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`ls -A /dev | tr '\n' ' '; echo
for d in null zero full random urandom tty; do chmod "$(stat -c %%a /dev/$d)" /dev/$d 2>/dev/null && echo "chmod $d"; chown 0:0 /dev/$d 2>/dev/null && echo "chown $d"; done
echo x > /dev/null; [ "$(head -c 3 /dev/zero | wc -c)" = 3 ]; [ "$(head -c 3 /dev/urandom | wc -c)" = 3 ]; echo x 2>/dev/null > /dev/full && echo "full took a write"
find /dev -type b | sed 's/^/block /'
for d in . /tmp /dev/shm /dev; do
	mknod $d/blk b %d %d 2>/dev/null || { echo "no mknod in $d"; continue; }
	head -c 1 $d/blk >/dev/null 2>&1 && echo "opened $d/blk"
	rm -f $d/blk
done
echo done`, unix.Major(dev), unix.Minor(dev))
	res, out, err := launch(t, rootAgent(sh(e, script)))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: %+v, %v", res, err)
	}
	want := "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero \nno mknod in /dev\ndone\n"
	if out != want {
		t.Errorf("agent printed\n%s\nwant\n%s", out, want)
	}
}

// TestDevTerminal: with a terminal as its standard streams and controlling
// terminal, the agent's /dev/tty reaches it and tty(1) names it.
func TestDevTerminal(t *testing.T) {
	privtest.Require(t)
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	// The agent leads its own session with a pseudo-terminal of its own as
	// its controlling terminal, relayed to pts.
	cfg := rootAgent(e.config("sh", "-c", `tty; echo via-dev-tty > /dev/tty; ls /dev/pts`))
	run, err := Start(cfg, pts, pts, pts)
	pts.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("agent: %+v, %v", res, err)
	}
	buf := make([]byte, 4096)
	var got []byte
	for {
		if err := unix.SetNonblock(int(ptmx.Fd()), true); err != nil {
			t.Fatal(err)
		}
		m, err := unix.Read(int(ptmx.Fd()), buf)
		if m <= 0 || err != nil {
			break
		}
		got = append(got, buf[:m]...)
	}
	if s := strings.ReplaceAll(string(got), "\r", ""); s != "/dev/console\nvia-dev-tty\nptmx\n" {
		t.Errorf("terminal shows %q", s)
	}
}
