package nsrun

import (
	"bytes"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The agent may write a query to its terminal (such as CSI 21 t, "report
// the window title") and exit: the operator's terminal answers into its
// own input, which after the run is the operator's shell. Once the relay
// has stopped, and before the terminal's settings are restored, the
// supervisor discards what the operator's terminal holds for reading. When
// the agent wrote an escape, the answer may still be on its way: the
// supervisor first asks the terminal for its status (CSI 5 n) and discards
// everything until that answer (CSI 0 n or CSI 3 n) arrives, or for at
// most answerWait. Terminals answer in order, so every answer to the
// agent's queries comes before it. (A variable for tests, whose terminal
// may be slow to answer on a loaded machine.)
var answerWait = time.Second

// statusQuery asks the terminal for its status; its answers end in 'n'
// (statusOK, or "\x1b[3n" for a malfunction).
var (
	statusQuery   = []byte("\x1b[5n")
	statusAnswers = [][]byte{[]byte("\x1b[0n"), []byte("\x1b[3n")}
)

// escapeWatch passes writes to w and records in seen whether any held an
// escape (ESC, or the byte of the 8-bit CSI 0x9b, alone or in UTF-8's
// U+009B), which can start a query.
type escapeWatch struct {
	w    io.Writer
	seen *atomic.Bool
}

func (e escapeWatch) Write(p []byte) (int, error) {
	if !e.seen.Load() && (bytes.IndexByte(p, 0x1b) >= 0 || bytes.IndexByte(p, 0x9b) >= 0) {
		e.seen.Store(true)
	}
	return e.w.Write(p)
}

// discardAnswers empties the input of the operator's terminal once the
// relay has stopped (see answerWait). It acts only on a terminal the
// supervisor read in raw mode, as the foreground process group: flushing
// another would stop it (SIGTTOU) or take the input of a job it does not
// own.
func (t *terminal) discardAnswers() {
	if t.in == nil || t.saved == nil {
		return
	}
	fd := int(t.in.Fd())
	if t.escaped.Load() && sameTerminal(t.in, t.out) {
		awaitStatus(int(t.out.Fd()), fd, answerWait)
	}
	_ = tcflush(fd, unix.TCIFLUSH)
}

// sameTerminal reports whether a and b are one terminal: the query the
// agent wrote to b is answered in a's input, and a status query written
// to b lands in no file or pipe.
func sameTerminal(a, b *os.File) bool {
	if !isTerminal(a) || !isTerminal(b) {
		return false
	}
	var sa, sb unix.Stat_t
	return unix.Fstat(int(a.Fd()), &sa) == nil && unix.Fstat(int(b.Fd()), &sb) == nil && sa.Rdev == sb.Rdev
}

// awaitStatus writes statusQuery to out, where the agent's output went, and
// reads and drops the input of terminal fd, in raw mode, until a status
// answer arrives or d has passed.
func awaitStatus(out, fd int, d time.Duration) {
	if _, err := unix.Write(out, statusQuery); err != nil {
		return
	}
	end := time.Now().Add(d)
	buf := make([]byte, 4096)
	var tail []byte // the last bytes read, for an answer split across reads
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		left := time.Until(end)
		if left <= 0 {
			return
		}
		fds[0].Revents = 0
		n, err := unix.Poll(fds, int(left/time.Millisecond)+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 || fds[0].Revents&unix.POLLIN == 0 {
			return
		}
		n, err = unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || n == 0 {
			return
		}
		tail = append(tail, buf[:n]...)
		for _, a := range statusAnswers {
			if bytes.Contains(tail, a) {
				return
			}
		}
		if len(tail) > len(statusQuery) {
			tail = tail[len(tail)-len(statusQuery):]
		}
	}
}

// tcflush is tcflush(3): it discards data the terminal fd holds, by queue
// (unix.TCIFLUSH: received, not read).
func tcflush(fd, queue int) error {
	for {
		err := unix.IoctlSetInt(fd, unix.TCFLSH, queue)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
