package overlay

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
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
// on several files while each writer waits for one. It opens each file as
// the writer would (beneath the upper layer's root, read-only) and hands
// the descriptor over (claim); the writer checks and hashes what it reads
// from it as from one it opened itself.
type readAhead struct {
	mu    sync.Mutex
	cond  *sync.Cond
	taken int         // files the writers have taken
	done  bool        // the writers are finished
	fds   map[int]int // entry index → upper file opened ahead
}

func newReadAhead() *readAhead {
	r := &readAhead{fds: map[int]int{}}
	r.cond = sync.NewCond(&r.mu)
	return r
}

// claim returns the descriptor opened ahead for entry i, which the caller
// then owns, or -1 when there is none.
func (r *readAhead) claim(i int) int {
	if r == nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fd, ok := r.fds[i]
	if !ok {
		return -1
	}
	delete(r.fds, i)
	return fd
}

// take tells the read-ahead that the writers took file k.
func (r *readAhead) take(k int) {
	r.mu.Lock()
	r.taken = max(r.taken, k+1)
	r.mu.Unlock()
	r.cond.Signal()
}

// stop ends the read-ahead and closes the descriptors no writer claimed.
func (r *readAhead) stop() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	r.cond.Signal()
}

// closeUnclaimed closes what the read-ahead opened and no writer claimed;
// it runs once the read-ahead has ended.
func (r *readAhead) closeUnclaimed() {
	for i, fd := range r.fds {
		unix.Close(fd)
		delete(r.fds, i)
	}
}

// run opens and advises the files of idx in order, at most applyAhead
// ahead of the writers, skipping those they already took; so at most
// applyAhead descriptors wait for a writer to claim them.
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
		if e.Change == attest.Metadata {
			continue // mostly changed in place, without reading it
		}
		fd, err := linux.OpenBeneath(a.upper, string(e.Path), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
		if err != nil {
			continue // the writer reports it
		}
		linux.Fadvise(fd, 0, min(int64(e.New.Size), applyAheadBytes), unix.FADV_WILLNEED)
		r.mu.Lock()
		if r.done || j < r.taken {
			unix.Close(fd) // too late: the writer opened it itself
		} else {
			r.fds[idx[j]] = fd
		}
		r.mu.Unlock()
	}
}
