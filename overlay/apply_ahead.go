package overlay

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// applyAhead is how many files the read-ahead of createFiles asks the
// kernel for before the writers reach them.
const applyAhead = 64

// applyAheadBytes is how much of each file the read-ahead asks for; the
// kernel's own read-ahead takes over as a larger file is read on.
const applyAheadBytes = applyBufSize

// readAhead asks the kernel to start reading the upper files the writers
// of createFiles will copy next, so that on a cold cache the disk works
// on several files while each writer waits for one. It only advises: the
// writers open, check and read every file themselves.
type readAhead struct {
	mu    sync.Mutex
	cond  *sync.Cond
	taken int  // files the writers have taken
	done  bool // the writers are finished
}

func newReadAhead() *readAhead {
	r := &readAhead{}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// take tells the read-ahead that the writers took file k.
func (r *readAhead) take(k int) {
	r.mu.Lock()
	r.taken = max(r.taken, k+1)
	r.mu.Unlock()
	r.cond.Signal()
}

// stop ends the read-ahead.
func (r *readAhead) stop() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	r.cond.Signal()
}

// run advises the files of idx in order, at most applyAhead ahead of the
// writers, skipping those they already took.
func (r *readAhead) run(a *applier, idx []int) {
	for j := range idx {
		r.mu.Lock()
		for !r.done && j >= r.taken+applyAhead {
			r.cond.Wait()
		}
		stop, behind := r.done, j < r.taken
		r.mu.Unlock()
		if stop {
			return
		}
		if behind {
			continue
		}
		e := &a.entries[idx[j]]
		fd, err := linux.OpenBeneath(a.upper, string(e.Path), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			continue // the writer reports it
		}
		linux.Fadvise(fd, 0, min(int64(e.New.Size), applyAheadBytes), unix.FADV_WILLNEED)
		unix.Close(fd)
	}
}
