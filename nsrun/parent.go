package nsrun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// envMarker is set in the environment of a re-executed binary to make Init
// take over; its value names the stage.
const envMarker = "_LAYERSEAL_NSRUN"

// forwarded are the signals the supervisor passes on to the agent. SIGUSR1
// is not among them: it asks the supervisor for a checkpoint.
var forwarded = []os.Signal{unix.SIGTERM, unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR2, unix.SIGWINCH}

// terminalSignals are sent by a terminal to its whole foreground process
// group, which the agent belongs to: when the supervisor is in that group the
// agent got its own copy, and forwarding would deliver it twice.
var terminalSignals = map[os.Signal]bool{unix.SIGINT: true, unix.SIGQUIT: true, unix.SIGWINCH: true}

// Run is a launched init. Its methods are called in order: Ready, then Go
// (or Abort), then Wait.
type Run struct {
	cmd  *exec.Cmd
	sock *os.File
	dec  *json.Decoder
	wmu  sync.Mutex
	enc  *json.Encoder
	tty  int // the controlling terminal, or -1

	sigs     chan os.Signal
	sigsDone chan struct{}
	waited   bool
	waitErr  error
}

// Start re-executes the running binary (/proc/self/exe) as init in new mount
// and PID namespaces, hands it cfg, and returns once it runs. stdin, stdout
// and stderr are passed to init and the agent as they are, so a terminal
// stays the agent's controlling terminal and the agent stays in the caller's
// process group. Init is killed when the calling process dies. The binary must
// call Init at the start of main.
func Start(cfg Config, stdin, stdout, stderr *os.File) (*Run, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Process.Env == nil {
		cfg.Process.Env = DefaultEnv(cfg.Process.User.UID, os.Getenv("TERM"))
	}
	if cfg.Process.Cwd == "" {
		cfg.Process.Cwd = cfg.Workspace
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	parent, child := os.NewFile(uintptr(fds[0]), "nsrun-supervisor"), os.NewFile(uintptr(fds[1]), "nsrun-init")
	defer child.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       []string{"layerseal-init"},
		Env:        []string{envMarker + "=init"},
		Dir:        "/",
		Stdin:      stdin,
		Stdout:     stdout,
		Stderr:     stderr,
		ExtraFiles: []*os.File{child},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWPID,
			Pdeathsig:  unix.SIGKILL,
		},
	}
	// The parent-death signal fires when the thread that forked exits. A
	// fresh goroutine is never on a thread locked by the caller, and the Go
	// runtime does not end unlocked threads.
	started := make(chan error, 1)
	go func() { started <- cmd.Start() }()
	if err := <-started; err != nil {
		parent.Close()
		return nil, fmt.Errorf("start init %q: %w", cmd.Path, err)
	}
	r := &Run{cmd: cmd, sock: parent, dec: json.NewDecoder(bufio.NewReader(parent)), enc: json.NewEncoder(parent), tty: -1}
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
	return *m.Ready, nil
}

// Go lets init start the agent and returns once the agent's command has been
// executed, or why it could not be (wrapping ErrCommandNotFound when the
// command is not in PATH). From then on the supervisor's SIGTERM, SIGHUP
// and SIGUSR2 are passed on to the agent, and so are SIGINT, SIGQUIT
// and SIGWINCH unless the supervisor is in its terminal's foreground process
// group (the terminal then signals the agent itself), until Wait returns.
func (r *Run) Go() error {
	if err := r.send(message{Go: true}, nil); err != nil {
		r.Abort()
		return err
	}
	m, err := r.receive()
	if err != nil {
		return err
	}
	if m.Error != "" {
		r.Abort()
		return initError(m)
	}
	if !m.Started {
		r.Abort()
		return errors.New("init sent something other than started")
	}
	if fd, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err == nil {
		r.tty = fd
	}
	r.sigs = make(chan os.Signal, 16)
	r.sigsDone = make(chan struct{})
	signal.Notify(r.sigs, forwarded...)
	go r.forward()
	return nil
}

func (r *Run) forward() {
	defer close(r.sigsDone)
	for sig := range r.sigs {
		if terminalSignals[sig] && r.inForeground() {
			continue
		}
		_ = r.Signal(sig.(syscall.Signal))
	}
}

// inForeground reports whether the supervisor is in the foreground process
// group of its controlling terminal.
func (r *Run) inForeground() bool {
	if r.tty < 0 {
		return false
	}
	pgrp, err := unix.IoctlGetInt(r.tty, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// Signal asks init to deliver sig to the agent's main process.
func (r *Run) Signal(sig syscall.Signal) error {
	return r.send(message{Signal: int(sig)}, nil)
}

// Abort kills init, and with it everything in its namespaces, and waits for
// it. The upper layer stays on disk.
func (r *Run) Abort() {
	if !r.waited {
		_ = r.cmd.Process.Kill()
	}
	_ = r.wait()
	r.stopSignals()
}

func (r *Run) stopSignals() {
	if r.sigs != nil {
		signal.Stop(r.sigs)
		close(r.sigs)
		<-r.sigsDone
		r.sigs = nil
	}
	if r.tty >= 0 {
		unix.Close(r.tty)
		r.tty = -1
	}
}

// Wait waits for the agent's main process to end and for init to kill what
// is left, audit the namespace and exit, and returns what init saw.
func (r *Run) Wait() (Result, error) {
	defer r.stopSignals()
	m, err := r.receive()
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
	return *m.Result, nil
}

// Kill kills init, and with it everything in the agent's namespaces, at
// once and without waiting: a Wait in progress then returns an error, as
// init can no longer report the agent's end.
func (r *Run) Kill() error {
	return r.cmd.Process.Kill()
}
