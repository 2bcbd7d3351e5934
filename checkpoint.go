package layerseal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// CheckpointDir is the directory of the output dir that holds a session's
// checkpoints, named by their sequence number: 000001.json, 000002.json, …
const CheckpointDir = "checkpoints"

// CheckpointFile is the file name of checkpoint seq.
func CheckpointFile(seq uint64) string { return fmt.Sprintf("%06d.json", seq) }

// CheckpointResult says what one checkpoint did.
type CheckpointResult struct {
	Seq       uint64
	File      string // where it was written
	Unchanged bool   // the probe found nothing changed: no file was read
	Count     uint64 // changes so far
	Complete  bool
	Hashed    uint64 // bytes hashed by this checkpoint
	Took      time.Duration
}

// checkpointer takes a session's checkpoints while the agent runs. Its
// methods are safe to call from several goroutines; checkpoints are taken
// one at a time.
type checkpointer struct {
	mu        sync.Mutex
	upper     string
	work      string
	lower     string
	policy    attest.Policy
	noMountID bool
	key       *attest.Signer
	base      attest.Checkpoint // session, launch and workspace of every checkpoint
	dir       string            // OUT/checkpoints
	changes   string            // the changes file, in the session's state dir

	log      attest.CheckpointLog
	lastFull uint64          // seq of the last checkpoint that walked
	lastRoot []byte          // its signed Merkle root
	lastWhy  []attest.Reason // its reasons (shared with log)
	retry    bool            // the last walk could not read everything: walk again
	probe    *probe.Index    // the probe of the last checkpoint
	digests  digestCache     // settled digests of upper files, from the last walk
	head     []byte          // SHA-256 of the last checkpoint's envelope file
	readHook func()          // tests: called for every walk of the upper layer
}

// take takes one checkpoint: a probe of the upper layer; when it equals
// the last checkpoint's and nothing is racy, an unchanged checkpoint
// without reading any file; otherwise a walk that hashes only upper files
// whose stat tuple is not the one a digest is known for.
func (c *checkpointer) take() (*CheckpointResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	idx, err := probe.Scan(c.upper, probe.ScanOptions{MaxEntries: int(c.policy.MaxEntries)})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	cp := c.base
	d := idx.Digest()
	cp.Probe, cp.ProbeEntries, cp.Taken = d[:], uint64(idx.Len()), time.Now().UTC()
	var hashed uint64
	if c.lastFull != 0 && !c.retry && idx.Unchanged(c.probe) {
		cp.Unchanged, cp.SameAs = true, c.lastFull
	} else {
		ch, cache, err := c.walk(idx)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		cp.Entries, cp.Incomplete, hashed = ch.Entries, sortReasons(ch.Incomplete), ch.Stats.BytesHashed
		cp.Stats = attest.Stats{UpperEntries: uint64(ch.Stats.UpperEntries), LowerEntries: uint64(ch.Stats.LowerEntries), BytesHashed: hashed}
		c.digests = cache
	}
	env, err := c.log.Append(c.key, &cp)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(c.dir, CheckpointFile(cp.Seq))
	if err := writeCheckpointFile(file, env); err != nil {
		// The log moved on in memory; a later checkpoint cannot be
		// written without this one, so stop taking them.
		return nil, fmt.Errorf("checkpoint %d: %w", cp.Seq, err)
	}
	c.probe, c.head = idx, sha(env)
	if !cp.Unchanged {
		c.lastFull, c.lastRoot, c.lastWhy = cp.Seq, cp.Root, cp.Incomplete
		c.retry = rereadNeeded(cp.Incomplete)
		if err := writeChanges(c.changes, cp.Seq, cp.Entries); err != nil {
			// The next checkpoint that walks reads from scratch.
			os.Remove(c.changes)
		}
	}
	return &CheckpointResult{Seq: cp.Seq, File: file, Unchanged: cp.Unchanged, Count: cp.Count,
		Complete: cp.Complete, Hashed: hashed, Took: time.Since(start)}, nil
}

// walk reads the upper layer against the lower one as the final statement
// does, with files that change while hashed reported unstable, and returns
// the changes and the digests it can vouch for. After a checkpoint that
// walked, only the upper subtrees that idx shows changed since the last
// probe (or that the last walk could not read) are classified; the rest
// is taken from that checkpoint's changes (see overlay.ReadChanged and
// readChanges).
func (c *checkpointer) walk(idx *probe.Index) (*overlay.Changes, digestCache, error) {
	if c.readHook != nil {
		c.readHook()
	}
	var seen []seenStat
	opt, err := c.readOptions()
	if err != nil {
		return nil, digestCache{}, err
	}
	opt.Settle = idx.Window
	known := opt.KnownDigest
	opt.KnownDigest = func(p attest.Path, st linux.Stat) []byte {
		seen = append(seen, seenStat{p, probe.StatOf(st)})
		return known(p, st)
	}
	var ch *overlay.Changes
	if prev, changed := c.previous(idx); prev != nil {
		ch, err = overlay.ReadChanged(c.upper, c.lower, prev, func(p attest.Path) bool { return probe.Touches(changed, string(p)) }, opt)
	} else {
		ch, err = overlay.Read(c.upper, c.lower, opt)
	}
	if err != nil {
		return nil, digestCache{}, err
	}
	return ch, newDigestCache(seen, ch, &c.digests), nil
}

// previous returns the changes of the last checkpoint that walked, read
// back from the changes file and checked against its signed root, and
// the upper paths changed since (in probe path order): those idx shows
// changed since the last probe and those the walk could not read. It
// returns nil when a walk from scratch is needed: there was none yet, it
// stopped part-way, the changes file cannot be read or does not match, or
// either probe was taken while the tree changed.
func (c *checkpointer) previous(idx *probe.Index) (*overlay.Changes, []string) {
	if c.lastFull == 0 || c.probe == nil || c.probe.Unsettled || idx.Unsettled {
		// An unsettled probe may have missed entries in both.
		return nil, nil
	}
	var again []string // what the last walk could not read
	for _, r := range c.lastWhy {
		switch r.Code {
		case attest.TimeBudget, attest.EntryBudget:
			return nil, nil
		case attest.Unstable, attest.Vanished, attest.Unreadable:
			if r.Path == "" {
				return nil, nil
			}
			again = append(again, string(r.Path))
		}
	}
	entries, err := readChanges(c.changes, c.lastFull, c.lastRoot)
	if err != nil {
		return nil, nil
	}
	changed := append(idx.Changed(c.probe), again...)
	slices.SortFunc(changed, probe.ComparePaths)
	return &overlay.Changes{Entries: entries, Incomplete: c.lastWhy}, changed
}

// readOptions are the final walk's options; known digests are reused.
func (c *checkpointer) readOptions() (overlay.ReadOptions, error) {
	rules, err := rulesOf(c.policy)
	if err != nil {
		return overlay.ReadOptions{}, err
	}
	opt := overlay.ReadOptions{
		Exclude:       rules.Excluded,
		DigestCap:     c.policy.DigestCap,
		MaxEntries:    c.policy.MaxEntries,
		MaxDirEntries: c.policy.MaxDirEntries,
		NoMountID:     c.noMountID,
		WorkDir:       c.work,
		KnownDigest:   c.digests.lookup,
	}
	if c.policy.TimeBudget > 0 {
		opt.Deadline = time.Now().Add(c.policy.TimeBudget)
	}
	return opt, nil
}

// final returns the options of the final walk (digests reused where the
// stat tuple is the one hashed) and the SHA-256 of the last checkpoint's
// envelope file (nil when there was none), which the final statement
// binds as it was signed. The changes file is no longer needed.
func (c *checkpointer) final() (func(attest.Path, linux.Stat) []byte, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head != nil {
		syncFS(c.dir)
	}
	os.Remove(c.changes)
	return c.digests.lookup, c.head
}

// changesTag opens a changes file.
const changesTag = "layerseal/checkpoint-changes/v1\x00"

// The changes file holds, in the session's state dir (root's alone, out
// of the agent's view), the changes of the last checkpoint that walked,
// which the next one that walks reuses where the upper layer is
// unchanged. It is written by the supervisor and read back only by it,
// and checked against the checkpoint's signed root before use:
//
//	file  = "layerseal/checkpoint-changes/v1" 0x00
//	        uint64 seq                    ; the checkpoint's, big-endian
//	        uint64 n                      ; number of entries
//	        n × (uint32 len, leaf)        ; attest.Entry.MarshalLeaf, in order
const checkpointChangesFile = "checkpoint-changes"

// writeChanges replaces the changes file with the entries of checkpoint
// seq: one leaf encoding per entry, about the size of the entries' JSON.
func writeChanges(path string, seq uint64, entries []attest.Entry) error {
	b := make([]byte, 0, len(changesTag)+16+len(entries)*160)
	b = append(b, changesTag...)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, uint64(len(entries)))
	for i := range entries {
		leaf := entries[i].MarshalLeaf()
		b = binary.BigEndian.AppendUint32(b, uint32(len(leaf)))
		b = append(b, leaf...)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// errChanges is readChanges' error for a file that is not the changes of
// the checkpoint asked for.
var errChanges = errors.New("not the changes of the last walked checkpoint")

// readChanges reads the changes file written for checkpoint seq and
// returns its entries if their Merkle root is root, the one signed in
// that checkpoint: one leaf parse, one leaf encoding and about two hashes
// per entry.
func readChanges(path string, seq uint64, root []byte) ([]attest.Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < len(changesTag)+16 || string(b[:len(changesTag)]) != changesTag ||
		binary.BigEndian.Uint64(b[len(changesTag):]) != seq {
		return nil, fmt.Errorf("changes file %q: %w", path, errChanges)
	}
	n := binary.BigEndian.Uint64(b[len(changesTag)+8:])
	b = b[len(changesTag)+16:]
	if n > uint64(len(b))/4 {
		return nil, fmt.Errorf("changes file %q: %d entries in %d bytes: %w", path, n, len(b), errChanges)
	}
	entries := make([]attest.Entry, n)
	for i := range entries {
		if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) {
			return nil, fmt.Errorf("changes file %q: truncated: %w", path, errChanges)
		}
		l := binary.BigEndian.Uint32(b)
		e, err := attest.ParseLeaf(b[4 : 4+l])
		if err != nil {
			return nil, fmt.Errorf("changes file %q: %w", path, err)
		}
		entries[i], b = *e, b[4+l:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("changes file %q: %d trailing bytes: %w", path, len(b), errChanges)
	}
	if got, err := attest.MerkleRoot(entries); err != nil || !bytes.Equal(got, root) {
		return nil, fmt.Errorf("changes file %q: %w", path, errChanges)
	}
	return entries, nil
}

// writeCheckpointFile writes a checkpoint by rename, without waiting for
// the disk: checkpoints are frequent, and the final statement, which
// binds the last of them, syncs their filesystem first (syncFS).
func writeCheckpointFile(path string, env []byte) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, env, 0o644); err != nil {
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
	if fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
}

// rereadNeeded reports whether a walk left parts unread that a later walk
// may read: then an unchanged probe does not make the next checkpoint
// unchanged.
func rereadNeeded(rs []attest.Reason) bool {
	for _, r := range rs {
		switch r.Code {
		case attest.Unstable, attest.Vanished, attest.Unreadable, attest.TimeBudget, attest.EntryBudget:
			return true
		}
	}
	return false
}

// seenStat is the stat an upper file was hashed with.
type seenStat struct {
	path attest.Path
	st   probe.Stat
}

// digestCache holds the digests of upper regular files that a walk hashed
// (or reused) and could vouch for: sorted by path bytes, one 72-byte
// record each (80 bytes), paths in one arena.
type digestCache struct {
	recs  []digestRecord
	arena []byte
}

type digestRecord struct {
	off, n uint32
	st     probe.Stat // 40 bytes (mode padded)
	sum    [32]byte
}

// newDigestCache keeps, for each listed upper file whose digest the walk
// computed or reused, the stat it was hashed with. A file hashed by the
// walk had its ctime settled first (overlay.ReadOptions.Settle) and its
// stat checked before and after the read, so a later write changes its
// ctime.
// A file the walk took from the previous checkpoint keeps its record in
// old.
func newDigestCache(seen []seenStat, ch *overlay.Changes, old *digestCache) digestCache {
	var dc digestCache
	byPath := make(map[attest.Path]probe.Stat, len(seen))
	for _, s := range seen {
		byPath[s.path] = s.st
	}
	unstable := map[attest.Path]bool{}
	for _, r := range ch.Incomplete {
		unstable[r.Path] = true
	}
	for i := range ch.Entries {
		e := &ch.Entries[i]
		if e.New == nil || e.New.Type != attest.File || len(e.New.SHA256) != 32 || unstable[e.Path] {
			continue
		}
		st, ok := byPath[e.Path]
		if !ok {
			i, found := old.find(e.Path)
			if !found || !bytes.Equal(old.recs[i].sum[:], e.New.SHA256) {
				continue
			}
			st = old.recs[i].st
		}
		r := digestRecord{off: uint32(len(dc.arena)), n: uint32(len(e.Path)), st: st}
		copy(r.sum[:], e.New.SHA256)
		dc.recs = append(dc.recs, r)
		dc.arena = append(dc.arena, e.Path...)
	}
	dc.recs, dc.arena = slices.Clip(dc.recs), slices.Clip(dc.arena)
	return dc
}

func (dc *digestCache) path(i int) string {
	r := &dc.recs[i]
	return string(dc.arena[r.off : r.off+r.n])
}

// lookup returns the digest kept for p when st is exactly the stat it was
// hashed with, nil otherwise.
func (dc *digestCache) lookup(p attest.Path, st linux.Stat) []byte {
	i, ok := dc.find(p)
	if !ok || dc.recs[i].st != probe.StatOf(st) {
		return nil
	}
	return slices.Clone(dc.recs[i].sum[:])
}

func (dc *digestCache) find(p attest.Path) (int, bool) {
	return slices.BinarySearchFunc(dc.recs, string(p), func(r digestRecord, p string) int {
		return strings.Compare(string(dc.arena[r.off:r.off+r.n]), p)
	})
}

// Bytes is the memory the cache holds.
func (dc *digestCache) Bytes() int {
	return cap(dc.recs)*int(unsafe.Sizeof(digestRecord{})) + cap(dc.arena)
}

// makeCheckpointDir makes OUT/checkpoints, which must not exist yet.
func makeCheckpointDir(out string) (string, error) {
	dir := filepath.Join(out, CheckpointDir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint dir: %w", err)
	}
	return dir, nil
}
