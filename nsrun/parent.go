package nsrun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// envMarker is set in the environment of a re-executed binary to make Init
// take over; its value names the stage.
const envMarker = "_LAYERSEAL_NSRUN"

// forwarded are the signals the supervisor passes on to the agent. SIGUSR1
// is not among them: it asks the supervisor for a checkpoint. The agent is
// in a session of its own, so no terminal signals it directly; SIGWINCH
// resizes the agent's pseudo-terminal instead when it has one.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR2, unix.SIGWINCH}

// killGrace is how long Kill waits for init to kill the namespace and report
// before it kills init itself.
const killGrace = 2 * time.Second

// Run is a launched init. Its methods are called in order: Ready, then Go
// (or Abort), then Wait.
type Run struct {
	cmd  *exec.Cmd
	sock *os.File
	dec  *json.Decoder
	wmu  sync.Mutex
	enc  *json.Encoder
	term *terminal  // the agent's pseudo-terminal, or nil
	cg   *cgroup    // the agent's cgroup, or nil
	v1   *v1Cgroups // its leaves in cgroup v1 hierarchies, or nil
	// missing are the restrictions the supervisor could not put in place,
	// for the launch record.
	missing []string

	killMu sync.Mutex
	killed bool // Kill was called
	// interrupted: the operator typed the interrupt character (Ctrl-C)
	// into the agent's pseudo-terminal.
	interrupted atomic.Bool
	hardKill    *time.Timer // kills init when it does not answer Kill

	rights  *rightsReader // the socket's reader, which keeps descriptors init sends
	network string        // the agent's network: "host", "none" or "proxy"
	proxy   net.Listener  // with network "proxy", the listener in the agent's network

	sigs     chan os.Signal
	sigsDone chan struct{}
	waited   bool
	waitErr  error
}

// Start re-executes the running binary (/proc/self/exe) as init in new
// namespaces and a session of its own, hands it cfg, and returns once it
// runs. stdin, stdout and stderr are passed to init and the agent as they
// are, except that when any of them is a terminal the agent gets a new
// pseudo-terminal in its place (its controlling terminal), which the
// supervisor relays from Go until Wait or Abort returns; the agent leads a
// session of its own either way. Descriptors 3 .. 3+cfg.Sandbox.PreserveFDs-1
// are passed on at the same numbers; no other descriptor reaches the agent.
// Init is killed when the calling process dies. The binary must call Init at
// the start of main.
func Start(cfg Config, stdin, stdout, stderr *os.File) (*Run, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.checkWritable(); err != nil {
		return nil, err
	}
	if cfg.Process.Env == nil {
		cfg.Process.Env = DefaultEnv(cfg.Process.User.UID, os.Getenv("TERM"))
	}
	if cfg.Process.Cwd == "" {
		cfg.Process.Cwd = cfg.Workspace
	}
	preserved, err := preservedFiles(cfg.Sandbox.PreserveFDs)
	if err != nil {
		return nil, err
	}
	defer closeFiles(preserved)
	term, err := openTerminal(stdin, stdout, stderr)
	if err != nil {
		return nil, err
	}
	cfg.Process.Terminal = term != nil
	if term != nil {
		stdin, stdout, stderr = term.streams(stdin, stdout, stderr)
		defer term.slave.Close()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "nsrun-supervisor"), os.NewFile(uintptr(fds[1]), "nsrun-init")
	cloneflags, _ := namespaces(cfg.Sandbox)
	cg, v1, missing := newCgroup(cfg.Sandbox)
	defer child.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"layerseal-init"},
		Env:        []string{envMarker + "=init"},
		Dir:        "/",
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: append([]*os.File{child}, preserved...),
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: cloneflags,
			Setsid:     true,
			Pdeathsig:  unix.SIGKILL,
		},
	}
	if cg != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.fd.Fd())
	}
	// The parent-death signal fires when the thread that forked exits. A
	// fresh goroutine is never on a thread locked by the caller, and the Go
	// runtime does not end unlocked threads (v1.start locks it only while
	// it forks from the agent's cgroup v1 leaves).
	started := make(chan error, 1)
	go func() { started <- v1.start(cmd) }()
	if err := <-started; err != nil {
		parent.Close()
		if term != nil {
			term.master.Close()
			term.closeOwned()
		}
		if cg != nil {
			cg.destroy()
		}
		v1.destroy()
		_, names := namespaces(cfg.Sandbox)
		return nil, fmt.Errorf("start init %q in new %s namespaces (the kernel must allow them all): %w", cmd.Path, strings.Join(names, ", "), err)
	}
	rights := &rightsReader{f: parent}
	r := &Run{cmd: cmd, sock: parent, dec: json.NewDecoder(bufio.NewReader(rights)), enc: json.NewEncoder(parent), term: term, cg: cg, v1: v1, missing: missing,
		rights: rights, network: cfg.Sandbox.withDefaults().Network}
	if err := r.send(message{}, &cfg); err != nil {
		r.Abort()
		return nil, err
	}
	return r, nil
}

// send writes one protocol line: m, or v when it is not nil.
func (r *Run) send(m message, v any) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if v == nil {
		v = m
	}
	if err := r.enc.Encode(v); err != nil {
		return fmt.Errorf("write to init: %w", err)
	}
	return nil
}

// receive reads one protocol line from init. When init closed the socket it
// waits for init and reports how init ended.
func (r *Run) receive() (message, error) {
	var m message
	err := r.dec.Decode(&m)
	if err == nil {
		return m, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		werr := r.wait()
		if werr == nil {
			return m, errors.New("init exited without reporting")
		}
		return m, fmt.Errorf("init ended without reporting: %w", werr)
	}
	return m, fmt.Errorf("read from init: %w", err)
}

func (r *Run) wait() error {
	if !r.waited {
		r.waited = true
		r.waitErr = r.cmd.Wait()
		r.sock.Close()
	}
	return r.waitErr
}

// initError turns an error reported by init into a Go error.
func initError(m message) error {
	if m.NotFound {
		return notFound(m.Error)
	}
	return errors.New(m.Error)
}

// Ready waits until init has set up the namespace and returns what it
// mounted. The agent has not started yet: init waits for Go.
func (r *Run) Ready() (Ready, error) {
	m, err := r.receive()
	if err != nil {
		return Ready{}, err
	}
	if m.Error != "" {
		r.Abort()
		return Ready{}, initError(m)
	}
	if m.Ready == nil {
		r.Abort()
		return Ready{}, errors.New("init sent something other than ready")
	}
	if err := r.takeProxyListener(); err != nil {
		r.Abort()
		return Ready{}, err
	}
	ready := *m.Ready
	if r.cg != nil {
		sb := &ready.Sandbox
		sb.Cgroup, sb.CgroupKill, sb.MemoryMax, sb.PidsMax = r.cg.rel, r.cg.kill, r.cg.mem, r.cg.pid
	}
	r.v1.record(&ready.Sandbox)
	ready.Sandbox.Missing = append(slices.Clone(r.missing), ready.Sandbox.Missing...)
	return ready, nil
}

// Go lets init start the agent and returns once the agent's command has been
// executed, or why it could not be (wrapping ErrCommandNotFound when the
// command is not in PATH). From then on the supervisor's SIGTERM, SIGHUP,
// SIGINT, SIGQUIT, SIGUSR2 and SIGWINCH are passed on to the agent until
// Wait returns (SIGWINCH resizes the agent's pseudo-terminal when it has
// one). With a pseudo-terminal, the operator's terminal is in raw mode from
// then on, restored when Wait or Abort returns; its interrupt character
// reaches the agent through its pseudo-terminal, and a second one within 3
// seconds of the first calls Kill.
func (r *Run) Go() error {
	if r.term != nil {
		if err := r.term.start(func() { r.interrupted.Store(true) }, r.Kill); err != nil {
			r.Abort()
			return err
		}
	}
	// Registered before the agent starts: a signal that comes while it
	// starts is held, and passed on once it has, so an operator's Ctrl-C
	// in that window is never lost.
	r.sigs = make(chan os.Signal, 16)
	r.sigsDone = make(chan struct{})
	started := make(chan bool, 1)
	signal.Notify(r.sigs, forwarded...)
	go r.forward(started)
	if err := r.send(message{Go: true}, nil); err != nil {
		started <- false
		r.Abort()
		return err
	}
	if whileStarting != nil {
		whileStarting()
	}
	m, err := r.receive()
	if err != nil {
		started <- false
		return err
	}
	if m.Error != "" {
		started <- false
		r.Abort()
		return initError(m)
	}
	if !m.Started {
		started <- false
		r.Abort()
		return errors.New("init sent something other than started")
	}
	started <- true
	return nil
}

// whileStarting, in tests, is called while init starts the agent.
var whileStarting func()

// forward passes the supervisor's signals on to the agent once started
// says it has started (false: it never will; they are dropped).
func (r *Run) forward(started <-chan bool) {
	defer close(r.sigsDone)
	ok := <-started
	for sig := range r.sigs {
		if !ok {
			continue
		}
		if sig == unix.SIGWINCH && r.term != nil {
			r.term.resize()
			continue
		}
		_ = r.Signal(sig.(syscall.Signal))
	}
}

// Kill kills the agent and everything in its namespace now: init kills them
// all and Wait reports the agent ended by SIGKILL. When init does not answer
// within 2 seconds it is killed too, and Wait reports that it ended without
// reporting. Safe to call from any goroutine, more than once.
func (r *Run) Kill() {
	r.killMu.Lock()
	defer r.killMu.Unlock()
	if r.killed {
		return
	}
	r.killed = true
	_ = r.send(message{Kill: true}, nil)
	r.hardKill = time.AfterFunc(killGrace, r.killInit)
}

// Killed reports whether Kill was called (by the caller, or by the
// operator's second interrupt).
func (r *Run) Killed() bool {
	r.killMu.Lock()
	defer r.killMu.Unlock()
	return r.killed
}

// Interrupted reports whether the operator typed the interrupt character
// (Ctrl-C) on the terminal whose input reaches the agent through its
// pseudo-terminal: the agent got a SIGINT from its terminal that the
// supervisor never received itself.
func (r *Run) Interrupted() bool { return r.interrupted.Load() }

// Signal asks init to deliver sig to the agent's main process.
func (r *Run) Signal(sig syscall.Signal) error {
	return r.send(message{Signal: int(sig)}, nil)
}

// killInit kills init and everything in its namespace at once: the whole
// cgroup when it has one, frozen processes included.
func (r *Run) killInit() {
	if r.cg != nil {
		r.cg.killAll()
	}
	_ = r.cmd.Process.Kill()
}

// Abort kills init, and with it everything in its namespaces, and waits for
// it. The upper layer stays on disk.
func (r *Run) Abort() {
	if !r.waited {
		r.killInit()
	}
	_ = r.wait()
	r.stopSignals()
	r.teardown()
}

// teardown kills what is left in the agent's cgroup and removes it. Init
// has exited.
func (r *Run) teardown() error {
	r.closeProxy()
	v1 := r.v1
	r.v1 = nil
	if r.cg == nil {
		return v1.destroy()
	}
	cg := r.cg
	r.cg = nil
	return errors.Join(cg.destroy(), v1.destroy())
}

// stopSignals ends forwarding and the terminal relay. Init has exited.
func (r *Run) stopSignals() {
	if r.sigs != nil {
		signal.Stop(r.sigs)
		close(r.sigs)
		<-r.sigsDone
		r.sigs = nil
	}
	r.killMu.Lock()
	if r.hardKill != nil {
		r.hardKill.Stop()
	}
	r.killMu.Unlock()
	if r.term != nil {
		r.term.stop(2 * time.Second)
		r.term = nil
	}
}

// Wait waits for the agent's main process to end and for init to kill what
// is left, audit the namespace and exit, and returns what init saw.
func (r *Run) Wait() (Result, error) {
	defer r.teardown()
	defer r.stopSignals()
	m, err := r.receive()
	for err == nil && m.Thaw {
		if r.cg != nil {
			r.cg.thawV1()
		}
		m, err = r.receive()
	}
	if err != nil {
		return Result{}, err
	}
	if m.Error != "" {
		r.Abort()
		return Result{}, initError(m)
	}
	if m.Result == nil {
		r.Abort()
		return Result{}, errors.New("init sent something other than a result")
	}
	if err := r.wait(); err != nil {
		return *m.Result, fmt.Errorf("init: %w", err)
	}
	r.stopSignals()
	m.Result.OOMKills = r.cg.oomKills() + r.v1.oomKills()
	if err := r.teardown(); err != nil {
		return *m.Result, err
	}
	return *m.Result, nil
}
