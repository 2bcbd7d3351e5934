package layerseal

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/policy"
	"github.com/layerseal/layerseal/probe"
)

// DefaultReservePercent is the share of the state dir's filesystem that a
// session whose policy names no MinFree keeps free: the agent is stopped
// when the space available there (df's "Avail", statfs f_bavail) falls
// under it. 5% is what ext4 reserves for root by default for the same
// end, that the host keeps working when users fill the disk; an agent's
// writes reach the upper layer with the supervisor's (root's)
// credentials, so that reserve of the filesystem's own does not hold it
// back. A filesystem that reports no size (ramfs) gets no reserve.
const DefaultReservePercent = 5

// ErrUnderReserve is wrapped by the error of a session that did not start
// because its state dir's filesystem already has less free space than the
// reserve the session keeps (Policy.MinFree).
var ErrUnderReserve = errors.New("not enough free space in the state dir")

// How often the upper layer's watcher looks (see upperWatch): never less
// often than every maxPoll, as often as every minPoll when the writes
// would reach a limit sooner, and never spending more than one part in
// pollCostShare of its time walking the upper layer.
const (
	minPoll        = 2 * time.Millisecond
	maxPoll        = 100 * time.Millisecond
	pollCostShare  = 4
	pollHeadroomBy = 2 // look again after half the time the writes would take to reach a limit
	// assumedRate is the least write rate the watcher paces itself for,
	// whatever slower rate it measured: about what one process writes to
	// the page cache of a local disk, so an agent that was idle and starts
	// writing at that rate is looked at in time.
	assumedRate = 1 << 30 // bytes per second
)

// statfsBytes returns the bytes available to unprivileged users, the
// bytes in use and the size of the filesystem holding the file open at fd.
func statfsBytes(fd int) (avail, used, size int64, err error) {
	fs, err := linux.Fstatfs(fd)
	if err != nil {
		return 0, 0, 0, err
	}
	unit := int64(fs.Frsize)
	if unit <= 0 {
		unit = fs.Bsize
	}
	return int64(fs.Bavail) * unit, int64(fs.Blocks-fs.Bfree) * unit, int64(fs.Blocks) * unit, nil
}

// prepareUpperLimit fills in the policy's MinFree (DefaultReservePercent of
// the state dir's filesystem when it is 0; none, recorded as 0, when it is
// negative) and refuses to start a session whose state dir has less than
// that free.
func (s *session) prepareUpperLimit() error {
	p := &s.cfg.Policy
	if p.MinFree < 0 {
		p.MinFree = 0
		return nil
	}
	f, err := os.Open(s.store.Dir())
	if err != nil {
		return fmt.Errorf("state dir %q: %w", s.store.Dir(), unwrapPath(err))
	}
	defer f.Close()
	avail, _, size, err := statfsBytes(int(f.Fd()))
	if err != nil {
		return fmt.Errorf("state dir %q: %w", s.store.Dir(), err)
	}
	what := "the policy's min_free"
	if p.MinFree == 0 {
		p.MinFree = size / 100 * DefaultReservePercent
		what = fmt.Sprintf("%d%% of its %s", DefaultReservePercent, policy.FormatSize(size))
	}
	if p.MinFree > 0 && avail < p.MinFree {
		return fmt.Errorf("%w: the filesystem of the state dir %q has %s free, less than the reserve of %s (%s) that a session keeps free there",
			ErrUnderReserve, s.store.Dir(), policy.FormatSize(avail), policy.FormatSize(p.MinFree), what)
	}
	return nil
}

// upperWatch stops the agent when its upper layer outgrows the policy's
// MaxUpper or its state dir's filesystem falls under MinFree.
//
// What it guarantees: it is a watcher, not a quota. Two loops look: one
// reads the free space of the state dir's filesystem (statfs), from the
// filesystem's own counters, which no agent can hide writes from; the
// other measures what the upper and work dirs take on disk with a walk
// (probe.DiskUsage), which an agent that moves files about while the walk
// runs can lead to undercount for that walk. Past a limit the agent's
// writes go on until the next look and the kill that follows it: at most
// one interval of writes (and the kill's own latency) lands beyond the
// limit. Each loop looks every maxPoll, and more often as its limit draws
// near: after half the time the writes would take to reach it at the
// rate last measured, or at assumedRate if that is more, down to minPoll;
// the walking loop never more often than pollCostShare times its walk's
// own duration, so a large upper layer is walked less often, while the
// reserve is still read at the same pace. Nothing written is lost: the
// agent is killed (its whole namespace), not its files, and the
// statement is made of the upper layer as it stands.
type upperWatch struct {
	s    *session
	kill func()
	halt chan struct{} // closed by end or by the first fire
	wg   sync.WaitGroup
	mu   sync.Mutex
	why  *attest.Reason // set when it stopped the agent
	ends sync.Once
}

// watchUpper starts the session's watcher, or returns nil when its policy
// sets neither limit. kill stops the agent.
func (s *session) watchUpper(kill func()) *upperWatch {
	p := s.cfg.Policy
	if p.MaxUpper <= 0 && p.MinFree <= 0 {
		return nil
	}
	w := &upperWatch{s: s, kill: kill, halt: make(chan struct{})}
	if p.MinFree > 0 {
		w.wg.Add(1)
		go w.watchFree(p.MinFree)
	}
	if p.MaxUpper > 0 {
		w.wg.Add(1)
		go w.watchSize(p.MaxUpper)
	}
	return w
}

// watchFree stops the agent once the state dir's filesystem has less than
// reserve bytes free.
func (w *upperWatch) watchFree(reserve int64) {
	defer w.wg.Done()
	dir, err := os.Open(string(w.s.dir))
	if err != nil {
		w.fire(fmt.Sprintf("the agent was stopped: the free space of its state dir's filesystem could not be watched (%v)", err), "the state dir's free space cannot be read")
		return
	}
	defer dir.Close()
	var p pacer
	for w.wait(p.next) {
		avail, used, _, err := statfsBytes(int(dir.Fd()))
		if err != nil {
			w.fire(fmt.Sprintf("the agent was stopped: the free space of its state dir's filesystem could not be read (%v)", err), "the state dir's free space cannot be read")
			return
		}
		if avail < reserve {
			w.fire(fmt.Sprintf("the agent was stopped when the state dir's filesystem had %s free, under the reserve of %s kept free there (min_free); the statement holds what it wrote until then",
				policy.FormatSize(avail), policy.FormatSize(reserve)), "the state dir's filesystem fell under its reserve of free space")
			return
		}
		p.pace(used, avail-reserve, 0)
	}
}

// watchSize stops the agent once its upper and work dirs take more than
// limit bytes on disk.
func (w *upperWatch) watchSize(limit int64) {
	defer w.wg.Done()
	var p pacer
	for w.wait(p.next) {
		start := time.Now()
		u, err := probe.DiskUsage(w.s.dir.upper(), w.s.dir.work())
		if err != nil {
			w.fire(fmt.Sprintf("the agent was stopped: its upper layer could not be measured against the limit of %s (max_upper): %v", policy.FormatSize(limit), err), "the upper layer cannot be measured")
			return
		}
		if u.Bytes > limit {
			w.fire(fmt.Sprintf("the agent was stopped when its upper layer took %s (%d bytes) on disk, over the limit of %s (max_upper); the statement holds what it wrote until then",
				policy.FormatSize(u.Bytes), u.Bytes, policy.FormatSize(limit)), "the agent's upper layer reached its limit")
			return
		}
		p.pace(u.Bytes, limit-u.Bytes, time.Since(start))
	}
}

// pacer sets when a loop of upperWatch looks next.
type pacer struct {
	next   time.Duration // 0 before the first look: minPoll
	at     time.Time     // of the last look
	filled int64         // bytes in use at the last look
}

// pace takes a look's findings: filled bytes in use, headroom bytes left
// before the limit, and what the look cost.
func (p *pacer) pace(filled, headroom int64, cost time.Duration) {
	now := time.Now()
	rate := float64(assumedRate) // bytes per second
	if secs := now.Sub(p.at).Seconds(); !p.at.IsZero() && secs > 0 {
		rate = max(rate, float64(filled-p.filled)/secs)
	}
	p.next = min(maxPoll, time.Duration(float64(headroom)/rate/pollHeadroomBy*float64(time.Second)))
	p.next = max(p.next, minPoll, pollCostShare*cost)
	p.at, p.filled = now, filled
}

// wait waits d (minPoll when 0) and reports whether the loop goes on.
func (w *upperWatch) wait(d time.Duration) bool {
	t := time.NewTimer(max(d, minPoll))
	defer t.Stop()
	select {
	case <-w.halt:
		return false
	case <-t.C:
		return true
	}
}

// fire records why the agent is stopped (the statement's reason), says so
// in short (what) and stops it; only the first call does.
func (w *upperWatch) fire(why, what string) {
	w.mu.Lock()
	first := w.why == nil
	if first {
		w.why = &attest.Reason{Code: attest.UpperLimit, Detail: why}
	}
	w.mu.Unlock()
	if !first {
		return
	}
	w.ends.Do(func() { close(w.halt) })
	w.s.log("%s: stopping the agent and everything it started; what it wrote so far will be attested and staged", what)
	w.kill()
}

// end stops the watcher and returns the reason it stopped the agent for,
// if it did.
func (w *upperWatch) end() []attest.Reason {
	if w == nil {
		return nil
	}
	w.ends.Do(func() { close(w.halt) })
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.why == nil {
		return nil
	}
	return []attest.Reason{*w.why}
}

// stoppedAtLimit reports whether the agent of a statement with reasons rs
// was stopped by the upper layer's limits: such a change set is staged,
// whatever the policy's apply mode.
func stoppedAtLimit(rs []attest.Reason) bool {
	return slices.ContainsFunc(rs, func(r attest.Reason) bool { return r.Code == attest.UpperLimit })
}
