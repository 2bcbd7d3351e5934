package nsrun

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/privtest"
)

// relayTerminal is a terminal as start leaves it for an operator's
// terminal slave that is stdin: raw, its settings saved, the agent's pty
// open. The operator's pty is the harness's.
func relayTerminal(t *testing.T, slave *os.File) *terminal {
	t.Helper()
	fd := int(slave.Fd())
	saved, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	raw := *saved
	raw.Iflag &^= unix.ICRNL | unix.IXON
	raw.Lflag &^= unix.ECHO | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		t.Fatal(err)
	}
	agentMaster, agentSlave := harnessTerminal(t)
	return &terminal{op: slave, in: slave, out: slave, saved: saved, master: agentMaster, slave: agentSlave}
}

// TestStopDiscardsPendingInput: bytes the operator's terminal received and
// nobody read (a terminal's answer to the agent's last query) are gone once
// the relay stops; the terminal has its settings back.
func TestStopDiscardsPendingInput(t *testing.T) {
	master, slave := harnessTerminal(t)
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	term := relayTerminal(t, slave)
	if _, err := master.Write([]byte("\x1b]lroot@host: ~\x1b\\rm -rf ~\r")); err != nil {
		t.Fatal(err)
	}
	waitInput(t, slave)
	term.stop(0)
	if after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil || after.Lflag&unix.ICANON == 0 || before.Lflag&unix.ICANON == 0 {
		t.Errorf("the terminal's settings were not restored (%v)", err)
	}
	if got := pending(t, slave, 300*time.Millisecond); got != "" {
		t.Errorf("the operator's terminal still holds %q after the relay stopped", got)
	}
}

// The tests' operator processes (this binary, run by startOperator) wait
// long for the status answer: on a loaded machine the test that plays the
// terminal may take seconds to answer, and an answer after the wait would
// read as a leak.
func init() { answerWait = 10 * time.Second }

// TestStopAwaitsLateAnswer: after the agent wrote an escape, an answer that
// arrives after the relay stopped (a terminal far away) is discarded too:
// the supervisor asks for the terminal's status and discards its input
// until the status answer, which comes after every earlier answer. A
// terminal that never answers costs at most answerWait.
func TestStopAwaitsLateAnswer(t *testing.T) {
	defer func(w time.Duration) { answerWait = w }(answerWait)
	for _, answers := range []bool{true, false} {
		// Long enough for this test's terminal to answer on a loaded
		// machine; short where the test waits it out.
		answerWait = 10 * time.Second
		if !answers {
			answerWait = 300 * time.Millisecond
		}
		master, slave := harnessTerminal(t)
		term := relayTerminal(t, slave)
		term.escaped.Store(true)
		asked := make(chan bool, 1)
		go func() {
			var seen []byte
			buf := make([]byte, 256)
			for {
				n, err := master.Read(buf)
				if err != nil {
					asked <- false
					return
				}
				if seen = append(seen, buf[:n]...); bytes.Contains(seen, statusQuery) {
					// The late answer to the agent's query, then the status.
					time.Sleep(50 * time.Millisecond)
					master.Write([]byte("\x1b]lroot@host: ~\x1b\\"))
					if answers {
						master.Write([]byte("\x1b[0n"))
					}
					asked <- true
					return
				}
			}
		}()
		start := time.Now()
		term.stop(0)
		took := time.Since(start)
		select {
		case ok := <-asked:
			if !ok {
				t.Fatal("the terminal's master failed")
			}
		case <-time.After(2 * time.Second):
			master.Close() // ends the reader
			t.Fatal("the supervisor did not ask for the terminal's status")
		}
		if answers && took >= answerWait {
			t.Errorf("with a status answer, stop took %v", took)
		}
		if !answers && (took < answerWait || took > answerWait+5*time.Second) {
			t.Errorf("with no status answer, stop took %v, want about %v", took, answerWait)
		}
		if got := pending(t, slave, 300*time.Millisecond); got != "" {
			t.Errorf("the operator's terminal still holds %q after the relay stopped (status answered: %v)", got, answers)
		}
	}
}

// waitInput waits until the terminal slave has input to read.
func waitInput(t *testing.T, slave *os.File) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(slave.Fd()), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 5000); n != 1 || err != nil {
		t.Fatalf("no input reached the terminal: %v", err)
	}
}

// TestHostileTerminalAnswerAfterRun: the agent writes a query (CSI 21 t,
// report the window title) and exits at once; the operator's terminal
// answers late, after the relay stopped (as one across a network does).
// Nothing may be left in the operator's input, where the shell would read
// it as typed.
func TestHostileTerminalAnswerAfterRun(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	master, slave := harnessTerminal(t)
	o := startOperator(t, sh(e, `printf '\033[21t'`), slave, master)
	// The harness is the terminal: it answers the agent's query only when
	// the supervisor asks for its status, or once the supervisor is done.
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			out := o.output()
			if !strings.Contains(out, "\x1b[21t") {
				continue
			}
			asked := strings.Contains(out, string(statusQuery))
			if asked || strings.Contains(out, "operator done") {
				master.Write([]byte("\x1b]lroot@host: ~\x1b\\"))
				if asked {
					master.Write([]byte("\x1b[0n"))
				}
				return
			}
		}
	}()
	out := o.finish(t, 20*time.Second)
	<-answered
	if !strings.Contains(out, "\x1b[21t") {
		t.Fatalf("the agent's query did not reach the terminal:\n%q", out)
	}
	if got := pending(t, slave, 500*time.Millisecond); got != "" {
		t.Errorf("after the run, the operator's shell would read %q", got)
	}
}

// TestEscapeWatch: output is passed on whole; an ESC or an 8-bit CSI, raw
// or in UTF-8, marks it as possibly holding a query.
func TestEscapeWatch(t *testing.T) {
	for in, want := range map[string]bool{"plain text\r\n": false, "héllo": false, "\x1b[21t": true, "\x9b5n": true, "\u009b5n": true} {
		var out bytes.Buffer
		var seen atomic.Bool
		if n, err := (escapeWatch{&out, &seen}).Write([]byte(in)); n != len(in) || err != nil || out.String() != in {
			t.Errorf("%q: wrote %d, %v, %q", in, n, err, out.String())
		}
		if seen.Load() != want {
			t.Errorf("%q: escape seen %v, want %v", in, seen.Load(), want)
		}
	}
}

// TestSameTerminal: the status query goes only to the terminal whose
// input is read, never into a file the agent's output was sent to.
func TestSameTerminal(t *testing.T) {
	_, slave := harnessTerminal(t)
	_, other := harnessTerminal(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		a, b *os.File
		want bool
	}{{slave, slave, true}, {slave, other, false}, {slave, f, false}, {f, slave, false}} {
		if got := sameTerminal(c.a, c.b); got != c.want {
			t.Errorf("sameTerminal(%s, %s) = %v, want %v", c.a.Name(), c.b.Name(), got, c.want)
		}
	}
}
