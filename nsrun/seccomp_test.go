package nsrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/internal/seccomp"
)

// probeEnv makes the test binary, run as the agent, try the calls the
// default filter refuses and print "name errno" lines (errno 0 for
// success) instead of running tests; "tiocsti" is its child on a new
// terminal.
const probeEnv = "NSRUN_TEST_SECCOMP_PROBE"

func init() {
	switch os.Getenv(probeEnv) {
	case "calls":
		os.Exit(probeCalls())
	case "tiocsti":
		c := byte('x')
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		_, _, e2 := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c)))
		fmt.Printf("tiocsti %d\ntioclinux %d\n", int(e), int(e2))
		os.Exit(0)
	}
}

func probeCalls() int {
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	say := func(name string, e syscall.Errno) { fmt.Fprintf(out, "%s %d\n", name, int(e)) }
	raw := func(nr uintptr, a ...uintptr) syscall.Errno {
		a = append(a, 0, 0, 0, 0, 0, 0)
		_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
		return e
	}
	str := func(s string) uintptr { b := append([]byte(s), 0); return uintptr(unsafe.Pointer(&b[0])) }
	say("keyctl", raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, ^uintptr(0) /* thread keyring */, 0))
	say("request_key", raw(unix.SYS_REQUEST_KEY, str("user"), str("layerseal-no-such-key"), 0, 0))
	say("add_key", raw(unix.SYS_ADD_KEY, str("user"), 0, 0, 0, ^uintptr(0)))
	say("bpf", raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0))
	say("perf_event_open", raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0))
	say("setns", raw(unix.SYS_SETNS, ^uintptr(0), 0))
	say("unshare_mount", raw(unix.SYS_UNSHARE, unix.CLONE_NEWNS))
	say("unshare_user", raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER))
	say("clone3", raw(unix.SYS_CLONE3, 0, 0))
	say("mount", raw(unix.SYS_MOUNT, str("none"), str("/"), str("tmpfs"), 0, 0))
	say("fsopen", raw(unix.SYS_FSOPEN, str("tmpfs"), 0))
	say("reboot", raw(unix.SYS_REBOOT, 0, 0, 0x4321fedc /* cad on: invalid magic order, never reboots */, 0))
	say("init_module", raw(unix.SYS_INIT_MODULE, 0, 0, str("")))
	say("kexec_load", raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, ^uintptr(0)))
	say("clock_settime", raw(unix.SYS_CLOCK_SETTIME, ^uintptr(0), 0))
	say("swapon", raw(unix.SYS_SWAPON, 0, 0))
	say("open_by_handle_at", raw(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(0), 0, 0))
	say("userfaultfd", raw(unix.SYS_USERFAULTFD, 0))
	// A child in new namespaces, started as a C library or Go starts one.
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{"PATH=/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS}
	var ce syscall.Errno
	if err := cmd.Run(); err != nil && !errors.As(err, &ce) {
		ce = 255 // it ran, and failed otherwise
	}
	say("clone_newns", ce)
	// TIOCSTI on a descriptor that is no terminal: the kernel says ENOTTY,
	// the filter, which reads only the request, EPERM. Then on the child's
	// own controlling terminal, a new pty, where the kernel would obey.
	null, err := os.Open("/dev/null")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := byte('x')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, null.Fd(), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
	say("tiocsti_notty", e)
	say("tiocsti_setup", tiocstiChild(out))
	return 0
}

func tiocstiChild(out io.Writer) syscall.Errno {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err.(*os.PathError).Err.(syscall.Errno)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		return err.(syscall.Errno)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		return err.(syscall.Errno)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err.(*os.PathError).Err.(syscall.Errno)
	}
	defer pts.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{probeEnv + "=tiocsti"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, out, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "tiocsti child: %v\n", err)
		return 255
	}
	return 0
}

// defaultCaps are Docker's default capability set: layerseal.DefaultCapabilities
// (which nsrun cannot import) with CAP_MKNOD and CAP_NET_RAW, a superset the
// filter answers the same for.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// probeAgent is cfg for the test binary, copied into the workspace, as a
// root agent with the default capabilities and no_new_privs.
func probeAgent(t *testing.T, e env) Config {
	t.Helper()
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ws, "probe"), self, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(filepath.Join(e.ws, "probe"))
	cfg.Process.Env = append(DefaultEnv(0, ""), probeEnv+"=calls")
	cfg.Process.NoNewPrivileges = true
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	return cfg
}

// start starts cfg and lets the agent go, returning what init reported
// and the agent's stdout.
func start(t *testing.T, cfg Config) (*Run, Ready, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	run, err := Start(cfg, nil, w, agentStderr(t))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := run.Ready()
	if err != nil {
		t.Fatalf("ready: %v", err)
	}
	if err := run.Go(); err != nil {
		t.Fatalf("go: %v", err)
	}
	return run, ready, r
}

// probe runs the probe agent and returns the errno of each call.
func probe(t *testing.T, cfg Config) (map[string]syscall.Errno, Ready) {
	t.Helper()
	run, ready, r := start(t, cfg)
	out, _ := io.ReadAll(r)
	res, err := run.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %+v, %v; printed %q", res, err, out)
	}
	got := map[string]syscall.Errno{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		name, n, ok := strings.Cut(l, " ")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			t.Fatalf("probe printed %q", out)
		}
		got[name] = syscall.Errno(v)
	}
	return got, ready
}

// The agent gets EPERM (ENOSYS for clone3) for what the default filter
// refuses; unconfined, the same calls reach the kernel, which answers
// otherwise for those checked both ways.
func TestSeccompRefusesInAgent(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	got, ready := probe(t, probeAgent(t, e))
	t.Logf("default: %v", got)
	if ready.Sandbox.Seccomp != "default" || len(ready.Sandbox.SeccompSHA256) != 32 {
		t.Errorf("ready sandbox %+v", ready.Sandbox)
	}
	want := map[string]syscall.Errno{"clone3": unix.ENOSYS}
	for _, n := range []string{"keyctl", "request_key", "add_key", "bpf", "perf_event_open", "setns", "unshare_mount",
		"unshare_user", "mount", "fsopen", "reboot", "init_module", "kexec_load", "clock_settime", "swapon",
		"open_by_handle_at", "userfaultfd", "clone_newns", "tiocsti_notty", "tiocsti", "tioclinux"} {
		want[n] = unix.EPERM
	}
	if e := got["tiocsti_setup"]; e != 0 {
		// A minimal guest mounts no devpts on /dev/pts: no pty to try
		// on. The agent could then open no terminal to type into either;
		// tiocsti_notty above shows the filter refusing the request.
		if e != unix.ENOENT && e != unix.ENODEV && e != unix.EIO {
			t.Errorf("no pseudo-terminal for the agent: %v", e)
		}
		t.Logf("no pseudo-terminal here (%v): TIOCSTI was tried on /dev/null only", e)
		delete(want, "tiocsti")
		delete(want, "tioclinux")
	}
	for n, w := range want {
		if g, ok := got[n]; !ok || g != w {
			t.Errorf("%s under the default filter: got %d (%v), want %v", n, g, g, w)
		}
	}

	e = newEnv(t)
	cfg := probeAgent(t, e)
	cfg.Sandbox.Seccomp = "unconfined"
	got, ready = probe(t, cfg)
	t.Logf("unconfined: %v", got)
	if ready.Sandbox.Seccomp != "unconfined" || ready.Sandbox.SeccompSHA256 != nil {
		t.Errorf("ready sandbox %+v", ready.Sandbox)
	}
	// Calls whose refusal by the kernel is not EPERM for this agent: the
	// filter, not the kernel, refused them above.
	for _, n := range []string{"keyctl", "request_key", "add_key", "perf_event_open", "setns", "clone3", "tiocsti_notty", "tiocsti"} {
		if e, ok := got[n]; !ok && n == "tiocsti" && got["tiocsti_setup"] != 0 {
			continue // no pseudo-terminal here, as above
		} else if !ok || e == unix.EPERM || e == unix.ENOSYS && n == "clone3" {
			t.Errorf("%s unconfined: got %v, the same as under the filter", n, got[n])
		}
	}
}

// An agent without no_new_privs gets the filter too: it is loaded while
// the stage still holds CAP_SYS_ADMIN, before the ids and capabilities
// change, and what follows it is allowed.
func TestSeccompWithoutNoNewPrivs(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	for _, d := range []string{filepath.Dir(filepath.Dir(e.ws)), filepath.Dir(e.ws)} {
		if err := os.Chmod(d, 0o755); err != nil { // the agent's uid must reach the workspace
			t.Fatal(err)
		}
	}
	cfg := probeAgent(t, e)
	cfg.Process.NoNewPrivileges = false
	cfg.Process.User = specs.User{UID: 1234, GID: 2345, AdditionalGids: []uint32{3456}}
	cfg.Process.Capabilities = &specs.LinuxCapabilities{}
	got, _ := probe(t, cfg)
	for _, n := range []string{"keyctl", "request_key", "setns", "tiocsti_notty"} {
		if got[n] != unix.EPERM {
			t.Errorf("%s under the filter without no_new_privs: got %v, want EPERM", n, got[n])
		}
	}
}

// A usual workload works under the filter, as root with the default
// capabilities.
func TestSeccompWorkload(t *testing.T) {
	privtest.Require(t)
	script := `set -e
d=$(mktemp -d); f=$(mktemp)
echo hello > a; mkdir -p b/c; cp a b/c/a; ln -s a l; chmod 600 a
tar cf "$d/t.tar" a b; mkdir "$d/x"; tar xf "$d/t.tar" -C "$d/x"
find . -name a | sort > found; cmp a "$d/x/b/c/a"; rm -r "$d" "$f"; mv found found2
(exit 0) & wait $!; echo ok`
	e := newEnv(t)
	cfg := sh(e, script)
	cfg.Process.NoNewPrivileges = true
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	run, ready, r := start(t, cfg)
	out, _ := io.ReadAll(r)
	res, err := run.Wait()
	if err != nil || res.ExitCode != 0 || string(out) != "ok\n" || ready.Sandbox.Seccomp != "default" {
		t.Errorf("workload: %+v, %v, printed %q, seccomp %q", res, err, out, ready.Sandbox.Seccomp)
	}
	t.Run("git", func(t *testing.T) {
		if _, err := exec.LookPath("git"); err != nil {
			t.Fatal("git is not installed: scripts/setup installs it, and the kernel matrix copies it into its guests")
		}
		e := newEnv(t)
		cfg := sh(e, `set -e; export HOME=/tmp GIT_CONFIG_NOSYSTEM=1
git init -q r; cd r; echo x > f; git add f
git -c user.name=a -c user.email=a@b commit -qm one; git log --oneline | wc -l`)
		cfg.Process.NoNewPrivileges = true
		cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
		run, _, r := start(t, cfg)
		out, _ := io.ReadAll(r)
		if res, err := run.Wait(); err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("git under the filter: %+v, %v, printed %q", res, err, out)
		}
	})
}

// The filter in force in the agent is byte for byte the program whose
// digest init reported (for the launch record) and a recompilation gives.
func TestSeccompLoadedProgramIsRecorded(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	cfg := e.config("sleep", "60")
	cfg.Process.NoNewPrivileges = true
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps}
	run, ready, _ := start(t, cfg)
	defer func() {
		_ = run.Signal(unix.SIGKILL)
		_, _ = run.Wait()
	}()
	pid := childOf(t, run.cmd.Process.Pid)
	base := statusField(t, os.Getpid(), "Seccomp_filters")
	if got := statusField(t, pid, "Seccomp"); got != "2" {
		t.Errorf("agent's seccomp mode %q, want 2 (filter)", got)
	}
	if got, want := statusField(t, pid, "Seccomp_filters"), strconv.Itoa(atoi(t, base)+1); got != want {
		t.Errorf("agent has %s filters, want %s", got, want)
	}
	again, err := seccomp.Default(defaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.SHA256(), ready.Sandbox.SeccompSHA256) {
		t.Errorf("recorded %x, recompiled %x", ready.Sandbox.SeccompSHA256, again.SHA256())
	}
	if base != "0" {
		// The kernel refuses PTRACE_SECCOMP_GET_FILTER to a tracer that is
		// itself filtered (the kernel matrix's statx-less wrapper).
		t.Logf("this test runs under %s seccomp filter(s): the loaded program is not read back", base)
		return
	}
	loaded := filterOf(t, pid)
	if !bytes.Equal(loaded.SHA256(), ready.Sandbox.SeccompSHA256) {
		t.Errorf("loaded program %x (%d instructions), recorded %x, recompiled %x",
			loaded.SHA256(), len(loaded), ready.Sandbox.SeccompSHA256, again.SHA256())
	}
}

// childOf is the one child of process pid (whichever of its threads
// started it).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	var f []string
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f = append(f, strings.Fields(string(b))...)
	}
	if len(f) != 1 {
		t.Fatalf("init %d has children %q", pid, f)
	}
	return atoi(t, f[0])
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, key)
	return ""
}

// filterOf reads the newest seccomp filter of process pid with ptrace.
func filterOf(t *testing.T, pid int) seccomp.Program {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("ptrace attach %d: %v", pid, err)
	}
	defer unix.PtraceDetach(pid)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		t.Fatalf("wait for %d: %v", pid, err)
	}
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	prog := make(seccomp.Program, n)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, uintptr(unsafe.Pointer(&prog[0])), 0, 0); e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	return prog
}

// A kernel without seccomp filters: recorded as unconfined, with a Missing
// sentence that makes the statement incomplete.
func TestSeccompMissing(t *testing.T) {
	defer func(f func() error) { seccompAvailable = f }(seccompAvailable)
	seccompAvailable = func() error { return fmt.Errorf("seccomp SECCOMP_GET_ACTION_AVAIL: %w", unix.ENOSYS) }
	var sb attest.Sandbox
	prog, err := seccompFilter(&Config{}, &sb)
	if err != nil || prog != nil {
		t.Fatalf("filter %v, %v", prog, err)
	}
	if sb.Seccomp != "unconfined" || sb.SeccompSHA256 != nil || len(sb.Missing) != 1 || !strings.Contains(sb.Missing[0], "seccomp") {
		t.Errorf("sandbox %+v", sb)
	}
	if r := sb.Reasons(); len(r) != 1 || r[0].Code != attest.SandboxWeakened {
		t.Errorf("reasons %+v", r)
	}
	// Asked unconfined: nothing missing.
	sb = attest.Sandbox{}
	if prog, err := seccompFilter(&Config{Sandbox: Sandbox{Seccomp: "unconfined"}}, &sb); err != nil || prog != nil || len(sb.Missing) != 0 || sb.Seccomp != "unconfined" {
		t.Errorf("unconfined: %v, %v, %+v", prog, err, sb)
	}
	// A process naming no capabilities keeps all of them: the filter is
	// the one for every capability.
	seccompAvailable = func() error { return nil }
	sb = attest.Sandbox{}
	prog, err = seccompFilter(&Config{}, &sb)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for n := range capNames {
		all = append(all, n)
	}
	slices.Sort(all)
	want, err := seccomp.Default(all)
	if err != nil || !bytes.Equal(prog.Bytes(), want.Bytes()) || !bytes.Equal(sb.SeccompSHA256, want.SHA256()) {
		t.Errorf("no capabilities named: program %x, want %x (%v)", prog.SHA256(), want.SHA256(), err)
	}
}
