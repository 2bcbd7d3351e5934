package nsrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"unsafe"

	"github.com/creack/pty"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

// toolEnv makes the test binary one of the tools below instead of running
// tests: "operator" (a supervisor: runs the Config in operatorEnv to the end
// on its own streams and prints how it ended), "tiocsti" (types its
// argument into the terminal on stdin with TIOCSTI), "takeover" (TOSTOP,
// its process group made the terminal's foreground group),
// "resume" (a session of its own, says "ready", then SIGCONT to the pid in
// its argument once that process is stopped).
const (
	toolEnv     = "LAYERSEAL_TEST_TOOL"
	operatorEnv = "LAYERSEAL_TEST_OPERATOR"
)

func init() {
	switch os.Getenv(toolEnv) {
	case "":
		return
	case "operator":
		var cfg Config
		if err := json.Unmarshal([]byte(os.Getenv(operatorEnv)), &cfg); err != nil {
			fmt.Println("operator: bad config:", err)
			os.Exit(1)
		}
		res, err := runOperator(cfg)
		fmt.Printf("operator done: exit=%d signal=%d err=%v\n", res.ExitCode, res.Signal, err)
		os.Exit(0)
	case "tiocsti":
		for _, c := range []byte(os.Args[1]) {
			if _, _, e := unix.Syscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafePointer(&c))); e != 0 {
				fmt.Fprintln(os.Stderr, "tiocsti:", e)
				os.Exit(1)
			}
		}
		fmt.Fprintln(os.Stderr, "tiocsti: typed")
		os.Exit(0)
	case "takeover":
		signal.Ignore(unix.SIGTTOU)
		tio, err := unix.IoctlGetTermios(0, unix.TCGETS)
		if err == nil {
			tio.Lflag |= unix.TOSTOP
			err = unix.IoctlSetTermios(0, unix.TCSETS, tio)
		}
		if err == nil && unix.Getpgrp() != unix.Getpid() {
			err = unix.Setpgid(0, 0)
		}
		if err == nil {
			err = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, unix.Getpgrp())
		}
		fmt.Fprintln(os.Stderr, "takeover:", err)
		os.Exit(0)
	case "resume":
		if _, err := unix.Setsid(); err != nil {
			os.Exit(1)
		}
		fmt.Println("ready")
		// Resume the process once it is stopped: a SIGCONT sent before
		// its STOP (a loaded machine) would leave it stopped for good.
		pid, _ := strconv.Atoi(os.Args[1])
		for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				os.Exit(1)
			}
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "T" {
				unix.Kill(pid, unix.SIGCONT)
				os.Exit(0)
			}
		}
		os.Exit(1)
	}
}

func runOperator(cfg Config) (Result, error) {
	run, err := Start(cfg, os.Stdin, os.Stdout, os.Stderr)
	if err != nil {
		return Result{}, err
	}
	if _, err := run.Ready(); err != nil {
		return Result{}, err
	}
	if err := run.Go(); err != nil {
		return Result{}, err
	}
	return run.Wait()
}

// tool copies the test binary where any user may run it and returns its
// path.
func tool(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	privtest.Searchable(t, dir)
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tool"), b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "tool")
}

// operator is a supervisor process started by a test: with a terminal, in
// a session of its own whose controlling terminal that is; otherwise in a
// process group of its own.
type operator struct {
	cmd  *exec.Cmd
	done chan error
	mu   sync.Mutex
	out  bytes.Buffer // what reached the operator's terminal (or its stdout)
}

// startOperator runs cfg in a supervisor whose streams are term (a terminal
// slave, which becomes its controlling terminal) or, when term is nil,
// pipes.
func startOperator(t *testing.T, cfg Config, term *os.File, master *os.File) *operator {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{cmd: exec.Command(os.Args[0]), done: make(chan error, 1)}
	o.cmd.Env = append(os.Environ(), toolEnv+"=operator", operatorEnv+"="+string(b))
	var r *os.File
	if term != nil {
		o.cmd.Stdin, o.cmd.Stdout, o.cmd.Stderr = term, term, term
		o.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		r = master
	} else {
		o.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var w *os.File
		if r, w, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		o.cmd.Stdout, o.cmd.Stderr = w, w
		defer w.Close()
	}
	if err := o.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			o.mu.Lock()
			o.out.Write(buf[:n])
			o.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { o.done <- o.cmd.Wait() }()
	return o
}

func (o *operator) output() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.String()
}

// finish waits for the operator to exit and its "operator done" line to
// arrive, and fails t if it does not within d: a stopped or killed
// supervisor.
func (o *operator) finish(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case err := <-o.done:
		deadline := time.Now().Add(2 * time.Second)
		for !strings.Contains(o.output(), "operator done") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil || !strings.Contains(o.output(), "operator done") {
			t.Fatalf("the supervisor did not finish its run: %v\n%s", err, o.output())
		}
	case <-time.After(d):
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.cmd.Process.Pid))
		o.cmd.Process.Kill()
		<-o.done
		t.Fatalf("the supervisor did not finish within %v (stat %q)\n%s", d, stat, o.output())
	}
	return o.output()
}

// harnessTerminal is the operator's terminal: a pseudo-terminal whose
// master plays the terminal emulator.
func harnessTerminal(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal for the harness: %v", err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// pending returns what the terminal slave holds for its reader (the
// operator's shell) within d.
func pending(t *testing.T, slave *os.File, d time.Duration) string {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 0, 0
	if err := unix.IoctlSetTermios(int(slave.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	var got []byte
	fds := []unix.PollFd{{Fd: int32(slave.Fd()), Events: unix.POLLIN}}
	for end := time.Now().Add(d); time.Now().Before(end); {
		if n, _ := unix.Poll(fds, 100); n <= 0 {
			continue
		}
		buf := make([]byte, 256)
		n, _ := unix.Read(int(slave.Fd()), buf)
		if n > 0 {
			got = append(got, buf[:n]...)
		}
	}
	return string(got)
}

// TestHostileTerminalInjection is attack 1: the agent, root with
// CAP_SYS_ADMIN, types a command into the terminal on its stdin with
// TIOCSTI. The operator's shell would run what lands in the input queue of
// the operator's terminal; nothing may. The seccomp filter, which refuses
// TIOCSTI on its own (TestSeccompRefusesInAgent), is off here: the agent's
// own pseudo-terminal must be enough.
func TestHostileTerminalInjection(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	tl := tool(t)
	master, slave := harnessTerminal(t)
	cfg := e.config(tl, "echo INJECTED\n")
	cfg.Sandbox.Seccomp = "unconfined"
	cfg.Process.Env = []string{toolEnv + "=tiocsti", "PATH=/usr/bin:/bin"}
	cfg.Sandbox.ReadOnly = []string{filepath.Dir(tl)}
	o := startOperator(t, cfg, slave, master)
	out := o.finish(t, 20*time.Second)
	if !strings.Contains(out, "tiocsti: typed") {
		t.Errorf("the agent could not type into its own terminal:\n%s", out)
	}
	if got := pending(t, slave, 500*time.Millisecond); strings.Contains(got, "INJECTED") {
		t.Fatalf("the agent typed %q into the operator's terminal", got)
	}
}

// TestHostileTerminalTakeover is attack 2: the agent (uid 65534) sets TOSTOP
// on its terminal, makes a process group of its own the terminal's
// foreground group and exits. The supervisor must not be stopped, and its
// last line must reach the operator's terminal.
func TestHostileTerminalTakeover(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	tl := tool(t)
	master, slave := harnessTerminal(t)
	cfg := e.config(tl)
	cfg.Process.User = specs.User{UID: 65534, GID: 65534}
	cfg.Process.Cwd = "/"
	cfg.Process.Env = []string{toolEnv + "=takeover", "PATH=/usr/bin:/bin"}
	cfg.Sandbox.ReadOnly = []string{filepath.Dir(tl)}
	o := startOperator(t, cfg, slave, master)
	out := o.finish(t, 20*time.Second)
	if !strings.Contains(out, "takeover: <nil>") {
		t.Errorf("the agent could not take over its own terminal:\n%s", out)
	}
	tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || tio.Lflag&unix.TOSTOP != 0 {
		t.Errorf("the operator's terminal has TOSTOP set after the run (%v)", err)
	}
}

// TestHostileProcessGroupSignals is attack 3: `kill -KILL 0` and `kill -STOP
// 0` from the agent (with a helper in a session of its own that resumes it)
// must reach neither the supervisor nor the rest of the caller's process
// group (here a sleep in the supervisor's group, standing for the
// operator's wrapper script).
func TestHostileProcessGroupSignals(t *testing.T) {
	privtest.Require(t)
	for name, script := range map[string]string{
		"kill": `kill -KILL 0`,
		"stop": `"$TOOL" $$ >ready & while [ ! -s ready ]; do sleep 0.05; done; kill -STOP 0; echo resumed`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			tl := tool(t)
			cfg := sh(e, script)
			cfg.Process.Env = []string{"TOOL=" + tl, toolEnv + "=resume", "PATH=/usr/bin:/bin"}
			cfg.Sandbox.ReadOnly = []string{filepath.Dir(tl)}
			o := startOperator(t, cfg, nil, nil)
			wrapper := exec.Command("sleep", "60")
			wrapper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: o.cmd.Process.Pid}
			if err := wrapper.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { wrapper.Process.Kill(); wrapper.Wait() }()
			out := o.finish(t, 20*time.Second)
			want := map[string]string{"kill": "signal=9", "stop": "exit=0"}[name]
			if !strings.Contains(out, want) {
				t.Errorf("the agent's run: want %s\n%s", want, out)
			}
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", wrapper.Process.Pid))
			if err != nil {
				t.Fatalf("the operator's wrapper is gone: %v", err)
			}
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); f[0] != "S" {
				t.Errorf("the operator's wrapper is in state %s, want S", f[0])
			}
		})
	}
}

func unsafePointer(c *byte) unsafe.Pointer { return unsafe.Pointer(c) }

// waitOutput waits until the operator's terminal showed s.
func (o *operator) waitOutput(t *testing.T, s string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !strings.Contains(o.output(), s); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the terminal never showed %q:\n%s", s, o.output())
		}
	}
}

// TestDoubleInterrupt: in raw mode the operator's Ctrl-C reaches the agent
// through its pseudo-terminal (an agent that traps it goes on); a second one
// within 3 s kills the namespace, says so, and the run ends by SIGKILL. The
// operator's terminal has its settings back.
func TestDoubleInterrupt(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	master, slave := harnessTerminal(t)
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	o := startOperator(t, sh(e, `trap 'echo got-int' INT; echo ready; while :; do sleep 0.1; done`), slave, master)
	o.waitOutput(t, "ready")
	master.Write([]byte{before.Cc[unix.VINTR]})
	o.waitOutput(t, "got-int")
	master.Write([]byte{before.Cc[unix.VINTR]})
	out := o.finish(t, 10*time.Second)
	if !strings.Contains(out, "signal=9 err=<nil>") || !strings.Contains(out, "second interrupt") {
		t.Errorf("after two interrupts: want the run ended by SIGKILL and a message\n%s", out)
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil || after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("the operator's terminal was not restored: %+v, want %+v (%v)", after, before, err)
	}
}
