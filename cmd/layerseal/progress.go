package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
)

// progressAfter is how long a phase runs before its progress is shown.
const progressAfter = time.Second

// progress keeps one line on a terminal up to date with what a long
// phase (reading the change set, sweeping, applying) has done, once the
// phase has taken more than progressAfter. It shows nothing when stderr is
// not a terminal; a nil *progress does nothing.
type progress struct {
	w     io.Writer
	mu    sync.Mutex
	phase string
	steps int
	// planned is how many changes an apply makes (0: not told), and
	// changes how many it has begun, counted as the path of its steps
	// changes (a directory's times, set last, may count again: the count
	// stops at planned).
	planned, changes int
	last             attest.Path
	since            time.Time
	shown            bool
	stop             chan struct{}
	done             chan struct{}
	once             sync.Once
}

// startProgress starts a progress line on stderr when it is a terminal.
func startProgress() *progress {
	if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	p := &progress{w: os.Stderr, since: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.phase != "" && time.Since(p.since) > progressAfter {
				count := ""
				switch p.phase {
				case "applying":
					count = fmt.Sprintf("%d step(s), ", p.steps)
					if p.planned > 0 {
						count = fmt.Sprintf("%d of %d change(s), ", min(p.changes, p.planned), p.planned)
					}
				case phases["read"]:
					count = plural(p.steps, "entry", "entries") + ", "
				}
				fmt.Fprintf(p.w, "\r\033[Klayerseal: %s: %s%s", p.phase, count, time.Since(p.since).Round(time.Second))
				p.shown = true
			}
			p.mu.Unlock()
		}
	}
}

// phases names the steps a session and an apply report.
var phases = map[string]string{
	"read":  "reading the change set",
	"sweep": "sweeping protected paths",
	"sign":  "signing",
}

// step is a layerseal progress callback: op names the step (see
// layerseal.ApplyOptions.Progress and RunConfig.Progress).
func (p *progress) step(op string, path attest.Path) {
	if p == nil {
		return
	}
	phase, ok := phases[op]
	if !ok {
		phase = "applying"
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if phase != p.phase {
		p.phase, p.steps, p.since = phase, 0, time.Now()
	}
	p.steps++
	if phase == "applying" && path != p.last {
		p.changes, p.last = p.changes+1, path
	}
}

// plan is an ApplyOptions.Planned: the number of changes the apply makes.
func (p *progress) plan(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.planned = n
}

// end stops the line and clears it; later calls do nothing.
func (p *progress) end() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		if p.shown {
			fmt.Fprint(p.w, "\r\033[K")
		}
	})
}

// progressFunc chains the tests' hook (applyProgress) with p's.
func progressFunc(p *progress) func(string, attest.Path) {
	hook := applyProgress
	return func(op string, path attest.Path) {
		if hook != nil {
			hook(op, path)
		}
		p.step(op, path)
	}
}
