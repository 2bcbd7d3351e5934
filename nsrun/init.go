package nsrun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moby/sys/mountinfo"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/seccomp"
)

// Init makes a binary re-executed by Start (or by init itself) do its part
// and exit; in any other process it returns at once. Call it first in main
// and in TestMain of test binaries that call Start.
func Init() {
	switch os.Getenv(envMarker) {
	case "":
		return
	case "init":
		os.Exit(runInit())
	case "exec":
		execAgent()
	default:
		fmt.Fprintf(os.Stderr, "layerseal: unknown %s stage %q\n", envMarker, os.Getenv(envMarker))
		os.Exit(125)
	}
}

// initSignals are the signals init handles itself, so that the Go runtime's
// default (exit) never applies: terminal signals reach the agent directly, and
// the supervisor relays the others over the socket.
var initSignals = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGPIPE, unix.SIGALRM, unix.SIGWINCH, unix.SIGIO, unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM, unix.SIGPROF}

// runInit is the namespace's PID 1. It returns init's exit status.
func runInit() int {
	sock := os.NewFile(3, "nsrun-supervisor")
	enc := json.NewEncoder(sock)
	send := func(m message) {
		// A supervisor that is gone cannot be told; the parent-death signal
		// ends init then.
		_ = enc.Encode(m)
	}
	fail := func(err error) int {
		send(message{Error: err.Error(), NotFound: errors.Is(err, ErrCommandNotFound)})
		killAll(nil)
		return 1
	}
	quiet := make(chan os.Signal, 16)
	signal.Notify(quiet, initSignals...)
	go func() {
		for range quiet {
		}
	}()
	children := make(chan os.Signal, 1)
	signal.Notify(children, unix.SIGCHLD)

	if os.Getpid() != 1 {
		return fail(fmt.Errorf("init is pid %d, not 1: not started by nsrun.Start", os.Getpid()))
	}
	// Nothing init was not handed on purpose may reach the agent; what it
	// was handed crosses only where startStage names it.
	if err := linux.CloexecFrom(3); err != nil {
		return fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl PR_SET_PDEATHSIG: %w", err))
	}
	dec := json.NewDecoder(bufio.NewReader(sock))
	var cfg Config
	if err := dec.Decode(&cfg); err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	if err := cfg.Validate(); err != nil {
		return fail(err)
	}
	// The agent stage starts now and waits for its spec: its start
	// overlaps the setup and the supervisor's launch record. It executes
	// nothing of the agent's before Go, and fail kills it.
	stage, err := startStage(&cfg)
	if err != nil {
		return fail(err)
	}
	// The filter is built, and the Landlock scopes decided, while setup
	// mounts: they read cfg, which setup does not change, and touch
	// nothing setup does.
	type built struct {
		prog   seccomp.Program
		scoped uint64
		sb     attest.Sandbox
		err    error
	}
	filterDone := make(chan built, 1)
	go func() {
		var b built
		b.scoped = landlockScope(&b.sb)
		b.prog, b.err = seccompFilter(&cfg, &b.sb)
		filterDone <- b
	}()
	ready, masks, baseline, err := setup(&cfg)
	f := <-filterDone
	if err != nil {
		return fail(err)
	}
	if f.err != nil {
		return fail(f.err)
	}
	filter, sb := f.prog, &ready.Sandbox
	sb.Seccomp, sb.SeccompSHA256, sb.Missing = f.sb.Seccomp, f.sb.SeccompSHA256, append(sb.Missing, f.sb.Missing...)
	sb.Scoped = f.sb.Scoped
	stage.enterRoot = ready.rootMoved
	stage.send(&cfg, filter, f.scoped)
	if err := sendReady(&cfg, &ready); err != nil {
		return fail(err)
	}

	// Messages from the supervisor; the channel closes when it goes away.
	msgs := make(chan message)
	go func() {
		defer close(msgs)
		for {
			var m message
			if err := dec.Decode(&m); err != nil {
				return
			}
			msgs <- m
		}
	}()
	for go_ := false; !go_; {
		m, ok := <-msgs
		if !ok {
			killAll(nil)
			return 1
		}
		go_ = m.Go
	}

	pid, err := stage.start()
	if err != nil {
		return fail(err)
	}
	send(message{Started: true})

	var status unix.WaitStatus
	for done := false; !done; {
		select {
		case m, ok := <-msgs:
			if !ok {
				killAll(nil)
				return 1
			}
			if m.Signal > 0 {
				_ = unix.Kill(pid, unix.Signal(m.Signal))
			}
			if m.Kill {
				_ = unix.Kill(-1, unix.SIGKILL)
			}
		case <-children:
			for {
				var ws unix.WaitStatus
				p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if err != nil || p <= 0 {
					break
				}
				if p == pid {
					status, done = ws, true
				}
			}
		}
	}
	// Reap what ended before the main process; count and kill the rest.
	for {
		p, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		if err != nil || p <= 0 {
			break
		}
	}
	res := Result{ExitCode: status.ExitStatus(), Outlived: killAll(func() { send(message{Thaw: true}) }), CapSysAdmin: capSysAdmin(&cfg.Process)}
	if status.Signaled() {
		res.ExitCode, res.Signal = -1, int(status.Signal())
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fail(fmt.Errorf("read mount table for the audit: %w", err))
	}
	res.Mounts = audit(cfg.Workspace, masks, baseline, infos)
	send(message{Result: &res})
	return 0
}

// killAll kills every other process in the PID namespace and reaps them all,
// returning how many it reaped. It blocks in wait4 until the last one is
// reaped (ECHILD), woken by each exit. When some are still there after
// 200ms (frozen by a cgroup v1 freezer, they ignore SIGKILL until thawed)
// it calls stuck, once, from another goroutine, and goes on waiting; it
// returns only after stuck has returned.
func killAll(stuck func()) int {
	_ = unix.Kill(-1, unix.SIGKILL)
	if stuck != nil {
		called := make(chan struct{})
		t := time.AfterFunc(200*time.Millisecond, func() { defer close(called); stuck() })
		defer func() {
			if !t.Stop() {
				<-called
			}
		}()
	}
	n := 0
	for {
		_, err := unix.Wait4(-1, nil, 0, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return n
		}
		n++
	}
}

// setup prepares the namespace: private propagation, the overlay, the masks,
// then the agent's view of the rest (see describeView). It returns the masked paths and the mount
// table as it is then, for the audit.
func setup(cfg *Config) (_ Ready, masks []string, _ []*mountinfo.Info, _ error) {
	secrets := etcSecretsAsync(cfg.Sandbox.withDefaults().View)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return Ready{}, nil, nil, fmt.Errorf("make %q recursively private: %w", "/", err)
	}
	if err := setupNamespaces(cfg.Sandbox); err != nil {
		return Ready{}, nil, nil, err
	}
	mounted, err := cfg.Mount().Perform()
	if err != nil {
		return Ready{}, nil, nil, err
	}
	for _, h := range cfg.Hide {
		p, err := hide(h)
		if err != nil {
			return Ready{}, nil, nil, err
		}
		if p != "" {
			masks = append(masks, p)
		}
	}
	sb := cfg.Sandbox.withDefaults()
	v := describeView(cfg.Workspace, cfg.Hide, sb.Writable, terminalPath(0))
	if sb.View == ViewMinimal {
		v = describeMinimal(minimalFor(cfg, sb, terminalPath(0), <-secrets))
	}
	vr, err := v.perform()
	if err != nil {
		return Ready{}, nil, nil, err
	}
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		return Ready{}, nil, nil, fmt.Errorf("read mount table: %w", err)
	}
	sb = cfg.Sandbox.withDefaults()
	_, names := namespaces(sb)
	ready := Ready{Mounted: mounted, Sandbox: attest.Sandbox{
		Terminal: terminalKind(cfg.Process.Terminal), NewSession: true, Namespaces: names, Network: sb.Network, Seccomp: "unconfined",
		PreservedFDs: sb.PreserveFDs, Writable: sb.Writable, ReadOnlyHost: vr.ReadOnlyHost, Missing: vr.Missing,
		View: sb.View, ReadOnly: vr.ReadOnly,
	}, rootMoved: vr.RootMoved}
	return ready, masks, infos, nil
}

// hide covers path: a directory with an empty read-only tmpfs, anything else
// with a read-only bind mount of /dev/null. A path that does not exist is
// left alone (and "" returned); symlinks are resolved first so the mask lands
// on the target, whose path is returned.
func hide(path string) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolve hidden path %q: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(real, &st); err != nil {
		return "", fmt.Errorf("stat hidden path %q: %w", real, err)
	}
	const flags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := unix.Mount("layerseal-hidden", real, "tmpfs", flags, "size=0,nr_inodes=1,mode=0500"); err != nil {
			return "", fmt.Errorf("mask hidden dir %q: %w", real, err)
		}
		return real, nil
	}
	if err := unix.Mount("/dev/null", real, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Errorf("mask hidden file %q: %w", real, err)
	}
	if err := unix.Mount("", real, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return "", fmt.Errorf("make mask of %q read-only: %w", real, err)
	}
	return real, nil
}

// terminalPath is the path of the terminal open on fd, or "" when fd is not
// a terminal or its path does not name that terminal.
func terminalPath(fd int) string {
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return ""
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !filepath.IsAbs(p) {
		return ""
	}
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(p, &b) != nil || a.Rdev != b.Rdev || a.Ino != b.Ino || a.Dev != b.Dev {
		return ""
	}
	return p
}
