package layerseal

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInterruptedBySignal is what a session's automatic apply stops with
// when the supervisor is interrupted (SIGINT, SIGTERM, SIGHUP) while it
// applies.
var ErrInterruptedBySignal = errors.New("interrupted")

// killWindow is how soon a second Ctrl-C must follow the first to stop the
// agent's whole namespace.
const killWindow = 3 * time.Second

// interrupts watches the supervisor's SIGINT, SIGTERM and SIGHUP for the
// rest of a session once the agent started. nsrun passes each on to the
// agent; a second SIGINT within killWindow of the one before kills the
// agent's namespace, for an agent that ignores them. One that ends the
// agent keeps the change set staged (see interruptEnded); one that comes
// after the agent ended stops the apply at its next step.
type interrupts struct {
	ch     chan os.Signal
	done   chan struct{}
	mu     sync.Mutex
	seen   os.Signal // the first one
	last   time.Time // the last SIGINT
	killed bool
	ended  bool      // the agent is gone: what comes now is for the supervisor
	late   os.Signal // the first one after the agent ended
}

func (s *session) watchInterrupts(kill func()) *interrupts {
	in := &interrupts{ch: make(chan os.Signal, 4), done: make(chan struct{})}
	signal.Notify(in.ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	go func() {
		defer close(in.done)
		for sig := range in.ch {
			in.mu.Lock()
			now := time.Now()
			again := sig == unix.SIGINT && !in.last.IsZero() && now.Sub(in.last) < killWindow && !in.killed
			if sig == unix.SIGINT {
				in.last = now
			}
			if in.seen == nil {
				in.seen = sig
			}
			if in.ended && in.late == nil {
				in.late = sig
			}
			if again {
				in.killed = true
			}
			in.mu.Unlock()
			switch {
			case in.ended:
				s.log("%s: stopping at the next step", unix.SignalName(sig.(unix.Signal)))
			case again:
				s.log("second Ctrl-C: stopping the agent and everything it started")
				kill()
			case sig == unix.SIGINT:
				s.log("Ctrl-C passed on to the agent; press it again within %v to stop the agent and everything it started; if the agent ends by it, the change set will be staged, not applied", killWindow)
			default:
				s.log("%s passed on to the agent; if the agent ends by it, the change set will be staged, not applied", unix.SignalName(sig.(unix.Signal)))
			}
		}
	}()
	return in
}

// signal returns the first signal seen (nil when none) and whether the
// agent's namespace was killed.
func (in *interrupts) signal() (os.Signal, bool) {
	if in == nil {
		return nil, false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.seen, in.killed
}

// stop is an ApplyOptions.Stop: it stops an apply once a signal came
// after the agent ended (one that ended the agent stages the run instead;
// one the agent took and went on from is the agent's business).
func (in *interrupts) stop() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.late != nil {
		return ErrInterruptedBySignal
	}
	return nil
}

// fromTerminal records what the agent's pseudo-terminal saw: the operator's
// Ctrl-C typed there reaches the agent as its terminal's SIGINT, never the
// supervisor, and a second one killed the namespace.
// It marks the agent's end: a signal from now on stops the apply.
func (in *interrupts) fromTerminal(interrupted, killed bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.ended = true
	if interrupted && in.seen == nil {
		in.seen = unix.SIGINT
	}
	in.killed = in.killed || killed
}

// end stops watching; the process's handling of the signals goes back to
// what it was.
func (in *interrupts) end() {
	signal.Stop(in.ch)
	close(in.ch)
	<-in.done
}
