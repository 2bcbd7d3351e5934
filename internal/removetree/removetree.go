// Package removetree removes a directory tree with several unlinks in
// flight at once.
//
// Removing many files one after another waits for each unlink in turn,
// and on a filesystem that frees blocks synchronously (ext4 without a
// journal mounted with discard, say) each unlink waits for the disk. RemoveAll
// removes what the tree holds on several goroutines, so those waits
// overlap, and otherwise promises what os.RemoveAll does: a missing path
// is no error, and a symlink anywhere in the tree is removed, never
// followed. It also never crosses into another mount: a directory with
// something mounted on it is reported, not emptied.
package removetree

import (
	"errors"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
)

// Workers is how many unlinks RemoveAll keeps in flight at most.
const Workers = 8

// chunk is how many names of one directory one task unlinks.
const chunk = 64

// RemoveAll removes path and everything beneath it. Every directory is
// opened relative to its parent's descriptor without following symlinks
// or crossing mounts, so renaming a directory of the tree while it runs
// cannot make it remove anything outside. It returns nil if path does not
// exist, else the first error met; it removes all it can either way.
func RemoveAll(path string) error {
	parent, err := linux.Openat(unix.AT_FDCWD, filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer linux.Close(parent)
	base := filepath.Base(path)
	err = linux.Unlinkat(parent, base, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	r := &remover{}
	r.cond = sync.NewCond(&r.mu)
	root := &dir{name: base, parentFD: parent}
	if err := r.open(root); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range Workers {
		wg.Go(r.work)
	}
	wg.Wait()
	return r.err
}

// dir is one directory of the tree being removed. pending counts the
// tasks that still remove names in it and its subdirectories not yet
// removed; when it reaches zero the directory is removed from its parent.
type dir struct {
	name     string
	parent   *dir // nil for the tree's root
	parentFD int  // the root's parent directory
	fd       int
	pending  int // guarded by remover.mu
}

func (d *dir) parentDirFD() int {
	if d.parent == nil {
		return d.parentFD
	}
	return d.parent.fd
}

// task unlinks names of d.
type task struct {
	d     *dir
	names []string
}

// remover is the shared state of one RemoveAll: a queue of tasks the
// workers take from until none is queued or running.
type remover struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []task
	running int
	err     error
}

// open opens d, reads its names and queues them in chunks; an empty
// directory is removed at once.
func (r *remover) open(d *dir) error {
	fd, err := linux.OpenBeneath(d.parentDirFD(), d.name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	names, err := linux.ReadDirNames(fd)
	if err != nil {
		linux.Close(fd)
		return err
	}
	d.fd = fd
	r.mu.Lock()
	for len(names) > 0 {
		n := min(chunk, len(names))
		r.queue = append(r.queue, task{d, names[:n]})
		names = names[n:]
		d.pending++
	}
	empty := d.pending == 0
	r.cond.Broadcast()
	r.mu.Unlock()
	if empty {
		r.finish(d)
	}
	return nil
}

// work runs tasks until there are none left.
func (r *remover) work() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for len(r.queue) == 0 && r.running > 0 {
			r.cond.Wait()
		}
		if len(r.queue) == 0 {
			r.cond.Broadcast()
			return
		}
		t := r.queue[len(r.queue)-1] // depth first: fewer directories open
		r.queue = r.queue[:len(r.queue)-1]
		r.running++
		r.mu.Unlock()
		r.run(t)
		r.mu.Lock()
		r.running--
		if r.running == 0 {
			r.cond.Broadcast()
		}
	}
}

// run unlinks the names of t; a directory among them is opened and its
// own names queued, and it is removed once they are gone.
func (r *remover) run(t task) {
	for _, name := range t.names {
		err := linux.Unlinkat(t.d.fd, name, 0)
		if errors.Is(err, unix.EISDIR) {
			sub := &dir{name: name, parent: t.d}
			r.mu.Lock()
			t.d.pending++ // until sub is removed
			r.mu.Unlock()
			if err = r.open(sub); err != nil {
				r.done(t.d)
			}
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			r.fail(err)
		}
	}
	r.done(t.d)
}

// done ends one pending task or subdirectory of d.
func (r *remover) done(d *dir) {
	r.mu.Lock()
	d.pending--
	last := d.pending == 0
	r.mu.Unlock()
	if last {
		r.finish(d)
	}
}

// finish removes the emptied directory d from its parent.
func (r *remover) finish(d *dir) {
	linux.Close(d.fd)
	err := linux.Unlinkat(d.parentDirFD(), d.name, unix.AT_REMOVEDIR)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		r.fail(err)
	}
	if d.parent != nil {
		r.done(d.parent)
	}
}

// fail records err unless an error came first.
func (r *remover) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}
