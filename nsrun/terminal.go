package nsrun

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// interruptWindow is how soon a second interrupt character from the
// operator's terminal must follow the first to kill the agent's namespace.
const interruptWindow = 3 * time.Second

// terminal is the pseudo-terminal the supervisor gives the agent when any of
// its streams is a terminal: the agent's streams that were the operator's
// terminal are the pty's slave instead, and the supervisor relays bytes and
// the window size between the operator's terminal and the pty's master. The
// agent then reaches no ioctl of the operator's terminal (TIOCSTI,
// tcsetpgrp, TOSTOP) and no process group on it.
type terminal struct {
	master, slave *os.File
	op            *os.File      // the operator's terminal: the first stream that is one
	in            *os.File      // stdin when it is the operator's terminal (relayed, raw), else nil
	out           *os.File      // where the agent's terminal output goes
	saved         *unix.Termios // the operator's settings while in raw mode
	intr          byte          // the operator's interrupt character, 0 if none
	stderr        *os.File      // the caller's stderr, for the interrupt message

	wakeR, wakeW *os.File // wake the input relay to stop it
	outDone      chan struct{}
	inDone       chan struct{}
	restoreOnce  sync.Once
	escaped      atomic.Bool // the agent wrote an escape to the terminal
	owned        []*os.File  // the supervisor's copies of op, in and out
}

// closeOwned closes the supervisor's copies of the operator's terminal.
func (t *terminal) closeOwned() {
	for _, f := range t.owned {
		f.Close()
	}
	t.owned = nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// openTerminal allocates the agent's pty when any of the streams is a
// terminal; it returns nil, nil when none is.
func openTerminal(stdin, stdout, stderr *os.File) (*terminal, error) {
	t := &terminal{stderr: stderr}
	for _, f := range []*os.File{stdin, stdout, stderr} {
		if isTerminal(f) {
			t.op = f
			break
		}
	}
	if t.op == nil {
		return nil, nil
	}
	if isTerminal(stdin) {
		t.in = stdin
	}
	for _, f := range []*os.File{stdout, stderr, stdin} {
		if isTerminal(f) {
			t.out = f
			break
		}
	}
	// The terminal's descriptors are the supervisor's own copies: the
	// caller may close its files once Start returns.
	var err error
	dups := map[*os.File]*os.File{}
	for _, f := range []**os.File{&t.op, &t.in, &t.out} {
		if *f == nil {
			continue
		}
		if d, ok := dups[*f]; ok {
			*f = d
			continue
		}
		fd, err := unix.FcntlInt((*f).Fd(), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("duplicate the terminal's descriptor: %w", err)
		}
		d := os.NewFile(uintptr(fd), (*f).Name())
		dups[*f], *f = d, d
	}
	t.owned = slices.Collect(maps.Values(dups))
	if t.master, t.slave, err = pty.Open(); err != nil {
		t.closeOwned()
		return nil, fmt.Errorf("cannot allocate a pseudo-terminal for the agent, which must not share your terminal (%w): mount devpts on /dev/pts, or redirect stdin, stdout and stderr away from the terminal", err)
	}
	if ws, err := pty.GetsizeFull(t.op); err == nil {
		_ = pty.Setsize(t.master, ws)
	}
	return t, nil
}

// streams returns the agent's streams: the slave in place of each that was
// a terminal.
func (t *terminal) streams(stdin, stdout, stderr *os.File) (*os.File, *os.File, *os.File) {
	sub := func(f *os.File) *os.File {
		if isTerminal(f) {
			return t.slave
		}
		return f
	}
	return sub(stdin), sub(stdout), sub(stderr)
}

// start puts the operator's terminal in raw mode (when it is stdin and the
// supervisor is in its foreground process group) and starts relaying. seen
// is called on each interrupt character relayed, interrupt on a second one
// within interruptWindow of the first (which is not relayed).
func (t *terminal) start(seen, interrupt func()) error {
	if t.in != nil {
		// A supervisor in the background leaves the terminal to the
		// foreground: changing its mode or reading it would stop us.
		pgrp, err := unix.IoctlGetInt(int(t.in.Fd()), unix.TIOCGPGRP)
		if err != nil || pgrp != unix.Getpgrp() {
			t.in = nil
		}
	}
	if t.in == nil {
		t.relayOutput()
		return nil
	}
	fd := int(t.in.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fmt.Errorf("read the terminal's settings: %w", err)
	}
	if saved.Lflag&unix.ISIG != 0 && saved.Cc[unix.VINTR] != 0 {
		t.intr = saved.Cc[unix.VINTR]
	}
	raw := *saved
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	t.saved = saved
	if t.wakeR, t.wakeW, err = os.Pipe(); err != nil {
		t.restore()
		return fmt.Errorf("pipe: %w", err)
	}
	t.relayOutput()
	t.inDone = make(chan struct{})
	go t.relayInput(seen, interrupt)
	return nil
}

// relayOutput copies what the agent writes to its pseudo-terminal to the
// operator's terminal until the master reads EOF or fails.
func (t *terminal) relayOutput() {
	t.outDone = make(chan struct{})
	go func() {
		defer close(t.outDone)
		_, _ = io.Copy(escapeWatch{t.out, &t.escaped}, t.master)
	}()
}

// relayInput copies the operator's keystrokes to the agent's pty until it is
// woken. It polls rather than reads blindly, so that it never holds a read
// of the operator's terminal once the run is over.
func (t *terminal) relayInput(seen, interrupt func()) {
	defer close(t.inDone)
	var last time.Time
	buf := make([]byte, 4096)
	fds := []unix.PollFd{{Fd: int32(t.in.Fd()), Events: unix.POLLIN}, {Fd: int32(t.wakeR.Fd()), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
			continue
		}
		n, err := unix.Read(int(t.in.Fd()), buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		for i := 0; i < n && t.intr != 0; i++ {
			if buf[i] != t.intr {
				continue
			}
			now := time.Now()
			if !last.IsZero() && now.Sub(last) <= interruptWindow {
				fmt.Fprintf(t.out, "\r\nlayerseal: second interrupt within %v: killing the agent and everything it started\r\n", interruptWindow)
				interrupt()
				return
			}
			last = now
			seen()
		}
		if _, err := t.master.Write(buf[:n]); err != nil {
			return
		}
	}
}

// resize copies the operator's window size to the agent's pty; the kernel
// then signals SIGWINCH to the pty's foreground process group.
func (t *terminal) resize() {
	if ws, err := pty.GetsizeFull(t.op); err == nil {
		_ = pty.Setsize(t.master, ws)
	}
}

// restore gives the operator's terminal its settings back. It may be called
// more than once, from any goroutine.
func (t *terminal) restore() {
	t.restoreOnce.Do(func() {
		if t.saved != nil {
			_ = unix.IoctlSetTermios(int(t.in.Fd()), unix.TCSETSW, t.saved)
		}
	})
}

// stop ends the relay: it waits up to drain for the agent's last output
// (the master reads EOF once every slave is closed, when init has exited),
// stops the input relay, discards what the operator's terminal holds for
// reading (discardAnswers) and restores it.
func (t *terminal) stop(drain time.Duration) {
	if t.outDone != nil {
		select {
		case <-t.outDone:
		case <-time.After(drain):
		}
	}
	t.master.Close()
	if t.wakeW != nil {
		t.wakeW.Write([]byte{0})
		<-t.inDone
		t.wakeR.Close()
		t.wakeW.Close()
	}
	t.discardAnswers()
	t.restore()
	t.closeOwned()
}
