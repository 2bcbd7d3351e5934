package overlay

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// hashAheadMin is the smallest upper file a quiescent read hashes on
// another goroutine; smaller ones cost less to hash than to hand over.
const hashAheadMin = 256 << 10

// hashAheadHanded, in tests, is called with each file handed to the
// hash-ahead goroutines, before they can read it.
var hashAheadHanded func(p attest.Path)

// hashAhead hashes large upper files on as many goroutines as there are
// cores while the walk goes on, so a final read of a change set of large
// files is not bound to one core's SHA-256 rate. It takes only files
// whose digest the walk does not itself compare (added, type-changed, or
// of another size than the lower file), with one name (no link group
// shares the digest), in a read with neither a settle time nor a
// deadline: those keep hashing in line, where a time-out stops the walk at
// the right place. Each job holds a read descriptor opened and checked in
// line, so the inode hashed is the one the walk classified.
type hashAhead struct {
	jobs chan hashJob
	wg   sync.WaitGroup

	mu     sync.Mutex // guards what follows
	failed []hashFailure
	bytes  int64
}

type hashJob struct {
	fd int
	st linux.Stat
	p  attest.Path
	s  *attest.State // receives the digest
}

// hashFailure is a job whose file could not be hashed: its entry is
// dropped and the error reported, as in line.
type hashFailure struct {
	p   attest.Path
	s   *attest.State
	err error
}

func newHashAhead() *hashAhead {
	workers := runtime.GOMAXPROCS(0)
	h := &hashAhead{jobs: make(chan hashJob, workers)}
	for range workers {
		h.wg.Go(h.work)
	}
	return h
}

func (h *hashAhead) work() {
	buf := make([]byte, digestBufSize)
	for j := range h.jobs {
		sum, err := digestFD(j.fd, j.st, buf, time.Time{})
		unix.Close(j.fd)
		h.mu.Lock()
		if err != nil {
			h.failed = append(h.failed, hashFailure{j.p, j.s, err})
		} else {
			j.s.SHA256 = sum
			h.bytes += int64(j.st.Size)
		}
		h.mu.Unlock()
	}
}

// wait finishes every job and returns the failures and the bytes hashed.
func (h *hashAhead) wait() ([]hashFailure, int64) {
	close(h.jobs)
	h.wg.Wait()
	return h.failed, h.bytes
}

// hashLater hands the upper file n (stat st, listed at p with state s) to
// the hash-ahead goroutines when the read allows it (see hashAhead);
// false when the caller must hash it in line.
func (r *reader) hashLater(p attest.Path, n node, st linux.Stat, s *attest.State) (handed bool) {
	fn, ok := n.(*fsNode)
	if !ok || st.Size < hashAheadMin || st.Nlink != 1 || r.opt.Settle > 0 || !r.opt.Deadline.IsZero() ||
		r.overCap(st.Size) || r.opt.KnownDigest != nil && r.opt.KnownDigest(p, fileStat(st)) != nil {
		return false // in line, which adds the cap's reason or takes the known digest
	}
	fd, err := fn.openForDigest(false)
	if err != nil {
		return false // in line, which reports it
	}
	if r.ahead == nil {
		r.ahead = newHashAhead()
	}
	if hashAheadHanded != nil {
		hashAheadHanded(p)
	}
	r.ahead.jobs <- hashJob{fd: fd, st: st, p: p, s: s}
	return true
}

// finishHashes waits for the hash-ahead goroutines, reports each file
// they could not hash, and returns the states of those files, whose
// entries the caller drops (as a failure in line would have).
func (r *reader) finishHashes() map[*attest.State]bool {
	if r.ahead == nil {
		return nil
	}
	failed, n := r.ahead.wait()
	r.ahead = nil
	r.stats.BytesHashed += uint64(n)
	drop := make(map[*attest.State]bool, len(failed))
	for _, f := range failed {
		r.fault(f.p, "upper", f.err)
		drop[f.s] = true
	}
	return drop
}
