package layerseal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// CheckpointDir is the directory of the output dir that holds a session's
// checkpoints, named by attest.CheckpointFile: 000001.json, 000002.json, …
const CheckpointDir = attest.CheckpointDir

// CheckpointResult says what one checkpoint did.
type CheckpointResult struct {
	Seq       uint64
	File      string // where it was written
	Unchanged bool   // the probe found nothing changed: no file was read
	Count     uint64 // changes so far
	Complete  bool
	Hashed    uint64 // bytes hashed by this checkpoint
	Took      time.Duration
	// HeadProblem says why the checkpoint's signed head (attest.HeadFile
	// beside File) was not written; empty when it was.
	HeadProblem string
}

// checkpointer takes a session's checkpoints while the agent runs. Its
// methods are safe to call from several goroutines; checkpoints are taken
// one at a time.
type checkpointer struct {
	mu sync.Mutex
	r  *reader // the session's
	// mappedUnseen: the upper layer's filesystem does not stamp writes
	// through shared mappings (probe.MappedWritesStamped), so no stat
	// can vouch that a file is as it was: every checkpoint walks from
	// scratch and hashes every file, and the final walk reuses nothing.
	mappedUnseen bool
	key          *attest.Signer
	base         attest.Checkpoint // session, launch and workspace of every checkpoint
	dir          string            // OUT/checkpoints
	changes      string            // the changes file, in the session's state dir

	log      attest.CheckpointLog
	lastFull uint64          // seq of the last checkpoint that walked
	lastWhy  []attest.Reason // its reasons (shared with log)
	listSum  []byte          // SHA-256 of the changes file written for it
	retry    bool            // the last walk could not read everything: walk again
	probe    *probe.Index    // the probe of the last checkpoint
	digests  *digestCache    // settled digests of upper files, from the last walk
	head     []byte          // SHA-256 of the last checkpoint's envelope file
	broken   error           // a checkpoint was signed but not written: the chain ends before it
	readHook func()          // tests: called for every walk of the upper layer

	egress func() []attest.Egress // the proxy's records so far; nil without a proxy
}

// take takes one checkpoint: a probe of the upper layer; when it equals
// the last checkpoint's and nothing is racy, an unchanged checkpoint
// without reading any file; otherwise a walk that hashes only upper files
// whose stat tuple is not the one a digest is known for, and a checkpoint
// that lists only the difference from the last one that walked.
func (c *checkpointer) take() (*CheckpointResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return nil, c.broken
	}
	start := time.Now()
	// The probe keeps its entries in the state dir; a file it cannot
	// write makes the next checkpoint that walks do so from scratch.
	idx, err := probe.Scan(c.r.upper, probe.ScanOptions{MaxEntries: int(c.r.policy.MaxEntries), Flush: true, Dir: filepath.Dir(c.changes)})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	kept := false
	defer func() {
		if !kept {
			idx.Close()
		}
	}()
	cp := c.base
	d := idx.Digest()
	cp.Probe, cp.ProbeEntries, cp.Taken = d[:], uint64(idx.Len()), time.Now().UTC()
	var hashed uint64
	var list *changeList
	if c.lastFull != 0 && !c.retry && !c.mappedUnseen && idx.Unchanged(c.probe) {
		cp.Unchanged, cp.SameAs = true, c.lastFull
	} else {
		prev := c.previous()
		ch, cache, err := c.walk(idx, prev)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		list = prev.next(ch.Entries)
		cp.Root, cp.Count, cp.Entries = list.root(), uint64(len(ch.Entries)), ch.Entries
		if prev != nil {
			cp.Base, cp.Entries, cp.Removed = c.lastFull, list.changed, list.removed
		}
		hashed = ch.Stats.BytesHashed
		cp.Incomplete = sortReasons(ch.Incomplete)
		cp.Stats = attest.Stats{UpperEntries: uint64(ch.Stats.UpperEntries), LowerEntries: uint64(ch.Stats.LowerEntries), BytesHashed: hashed}
		c.digests.close()
		c.digests = cache
	}
	if c.egress != nil {
		cp.Egress = c.egress()
	}
	env, err := c.log.Append(c.key, &cp)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(c.dir, attest.CheckpointFile(cp.Seq))
	if err := writeUnsynced(file, env, 0o644); err != nil {
		// The log moved on in memory, and no later checkpoint would
		// verify without this one: the chain ends with the last one
		// written, which the final statement binds.
		c.broken = fmt.Errorf("checkpoint %d could not be written, so no later one is taken: %w", cp.Seq, err)
		return nil, c.broken
	}
	c.head = sha(env)
	if !cp.Unchanged {
		// An unchanged probe has the last one's listings, with no entry
		// racy in either: the last one stays, and the new one's file goes
		// before it is written back, so the next probe's syncfs has
		// nothing of it to write.
		c.probe.Close()
		c.probe, kept = idx, true
	}
	var headProblem string
	if err := writeHead(c.key, attest.HeadOfCheckpoint(&cp), attest.HeadFile(file), writeUnsynced); err != nil {
		headProblem = fmt.Sprintf("checkpoint %d is written, but not its signed head: %v", cp.Seq, err)
	}
	if list != nil {
		c.lastFull, c.lastWhy = cp.Seq, cp.Incomplete
		c.retry = rereadNeeded(cp.Incomplete)
		if c.listSum, err = list.write(c.changes, cp.Seq); err != nil {
			// The next checkpoint that walks reads from scratch and
			// lists all its changes.
			os.Remove(c.changes)
			c.listSum = nil
		}
	}
	return &CheckpointResult{Seq: cp.Seq, File: file, Unchanged: cp.Unchanged, Count: cp.Count,
		Complete: cp.Complete, Hashed: hashed, Took: time.Since(start), HeadProblem: headProblem}, nil
}

// walk reads the upper layer against the lower one as the final statement
// does, with files that change while hashed reported unstable, and returns
// the changes and the digests it can vouch for. With prev, the changes of
// the last checkpoint that walked, only the upper subtrees that idx shows
// changed since the last probe (or that the last walk could not read) are
// classified, when both probes were taken while the tree was still and
// that walk read everything it was to; the rest is taken from prev (see
// overlay.ReadChanged).
func (c *checkpointer) walk(idx *probe.Index, prev *changeList) (*overlay.Changes, *digestCache, error) {
	if c.readHook != nil {
		c.readHook()
	}
	var seen []seenStat
	opt := c.readOptions()
	opt.Settle = idx.Window
	known := opt.KnownDigest
	opt.KnownDigest = func(p attest.Path, st overlay.FileStat) []byte {
		seen = append(seen, seenStat{p, probe.Stat(st)})
		return known(p, st)
	}
	var ch *overlay.Changes
	var err error
	if changed, ok := c.changedSince(idx); ok && prev != nil {
		prevCh := &overlay.Changes{Entries: prev.entries, Incomplete: c.lastWhy}
		ch, err = c.r.readChanged(prevCh, func(p attest.Path) bool { return probe.Touches(changed, string(p)) }, opt)
	} else {
		ch, err = c.r.read(opt)
	}
	if err != nil {
		return nil, nil, err
	}
	if c.mappedUnseen {
		return ch, nil, nil
	}
	return ch, newDigestCache(filepath.Dir(c.changes), seen, ch, c.digests), nil
}

// changedSince returns the upper paths changed since the last checkpoint
// that walked (in probe path order): those idx shows changed since the
// last probe and those that walk could not read. It returns false when a
// walk from scratch is needed: there was none yet, it stopped part-way,
// either probe was taken while the tree changed (it may have missed
// entries), or the filesystem does not stamp writes through mappings.
func (c *checkpointer) changedSince(idx *probe.Index) ([]string, bool) {
	if c.lastFull == 0 || c.probe == nil || c.probe.Unsettled || idx.Unsettled || c.mappedUnseen {
		return nil, false
	}
	var again []string // what the last walk could not read
	for _, r := range c.lastWhy {
		switch {
		case r.Code.Cut():
			return nil, false
		case r.Code.Transient():
			if r.Path == "" {
				return nil, false
			}
			again = append(again, string(r.Path))
		}
	}
	changed, err := idx.Changed(c.probe)
	if err != nil {
		// A listing of either probe is not as it was written: walk all.
		return nil, false
	}
	changed = append(changed, again...)
	slices.SortFunc(changed, probe.ComparePaths)
	return changed, true
}

// previous returns the changes of the last checkpoint that walked, read
// back from the changes file, or nil when there was none or the file is
// not the one written for it.
func (c *checkpointer) previous() *changeList {
	if c.lastFull == 0 || c.listSum == nil {
		return nil
	}
	l, err := readChangeList(c.changes, c.lastFull, c.listSum)
	if err != nil {
		return nil
	}
	return l
}

// readOptions are the final walk's options; known digests are reused.
func (c *checkpointer) readOptions() overlay.ReadOptions {
	opt := c.r.options()
	opt.KnownDigest = c.digests.lookup
	return opt
}

// final returns the options of the final walk (digests reused where the
// stat tuple is the one hashed) and the SHA-256 of the last checkpoint's
// envelope file (nil when there was none), which the final statement
// binds as it was signed. The changes file is no longer needed.
func (c *checkpointer) final() (func(attest.Path, overlay.FileStat) []byte, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head != nil {
		syncFS(c.dir)
	}
	os.Remove(c.changes)
	c.digests.unlink()
	c.probe.Close()
	c.probe = nil
	return c.digests.lookup, c.head
}

// writeUnsynced writes a file by rename, without waiting for the disk:
// checkpoints are frequent, and the final statement, which binds the last
// of them, syncs their filesystem first (syncFS); the changes file is
// only a cache.
func writeUnsynced(path string, data []byte, perm os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// syncFS flushes the filesystem holding dir.
func syncFS(dir string) {
	if fd, err := linux.Openat(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY); err == nil {
		linux.Syncfs(fd)
		linux.Close(fd)
	}
}

// rereadNeeded reports whether a walk left parts unread that a later walk
// may read: then an unchanged probe does not make the next checkpoint
// unchanged.
func rereadNeeded(rs []attest.Reason) bool {
	return slices.ContainsFunc(rs, func(r attest.Reason) bool { return r.Code.Transient() || r.Code.Cut() })
}

// makeCheckpointDir makes OUT/checkpoints, which must not exist yet.
func makeCheckpointDir(out string) (string, error) {
	dir := filepath.Join(out, CheckpointDir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint dir: %w", err)
	}
	return dir, nil
}
