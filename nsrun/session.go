package nsrun

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// newSession is the agent stage's step out of the supervisor's session: the
// agent leads a new session and process group, so no signal it sends to its
// group reaches the supervisor or the caller, and no terminal of the
// caller's is its controlling terminal. With terminal set, the first of its
// streams that is a terminal (the pseudo-terminal Start gave it) becomes its
// controlling terminal.
func newSession(terminal bool) error {
	if _, err := unix.Setsid(); err != nil {
		return fmt.Errorf("setsid: %w", err)
	}
	if !terminal {
		return nil
	}
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue
		}
		if err := unix.IoctlSetInt(fd, unix.TIOCSCTTY, 0); err != nil {
			return fmt.Errorf("make the agent's pseudo-terminal its controlling terminal (ioctl TIOCSCTTY on %d): %w", fd, err)
		}
		return nil
	}
	return fmt.Errorf("the agent was given a pseudo-terminal but none of its streams is one")
}

// terminalKind is the launch record's name for the agent's terminal.
func terminalKind(pty bool) string {
	if pty {
		return "pty"
	}
	return "streams"
}
