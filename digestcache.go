package layerseal

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// seenStat is the stat an upper file was hashed with.
type seenStat struct {
	path attest.Path
	st   probe.Stat
}

// digestCache holds the digests of upper regular files that a walk hashed
// (or reused) and could vouch for, with the stat each was hashed with. The
// records are kept in a file in the session's state dir (root's alone),
// sorted by path bytes and cut into blocks of about digestBlockSize;
// memory holds each block's first path, place and SHA-256, and the last
// few blocks read. A block read back is used only if its SHA-256 is the
// one held: otherwise, and when the file could not be written or read,
// lookups answer nothing and the files are hashed again.
//
//	record = uint32 path length, path, uint32 st_mode, uint64 inode,
//	         uint64 size, int64 mtime_ns, int64 ctime_ns, 32-byte SHA-256
//	         (all big-endian)
type digestCache struct {
	mu     sync.Mutex
	file   *os.File // nil: no records
	blocks []digestBlock
	recent []*loadedBlock // the blocks read last, the latest first
	failed bool           // a block could not be read as written
}

// digestBlock is where a block of records lies and what it hashes to.
type digestBlock struct {
	first string // the path of its first record
	off   int64
	size  int64
	sum   [32]byte
}

// loadedBlock is a block read back and checked: its bytes and where each
// record starts.
type loadedBlock struct {
	i    int
	b    []byte
	recs []int32
}

const (
	digestBlockSize = 32 << 10
	digestRecent    = 4
	digestRecFixed  = 4 + 36 + 32
)

// newDigestCache writes, in a new file in dir, for each listed upper file
// whose digest the walk computed or reused, the stat it was hashed with.
// A file hashed by the walk had its ctime settled first
// (overlay.ReadOptions.Settle) and its stat checked before and after the
// read, so a later write changes its ctime. A file the walk took from the
// previous checkpoint keeps its record in old. A cache whose file cannot
// be written holds nothing.
func newDigestCache(dir string, seen []seenStat, ch *overlay.Changes, old *digestCache) *digestCache {
	slices.SortFunc(seen, func(a, b seenStat) int { return cmp.Compare(a.path, b.path) })
	unstable := map[attest.Path]bool{}
	for _, r := range ch.Incomplete {
		unstable[r.Path] = true
	}
	dc := &digestCache{}
	f, err := os.CreateTemp(dir, ".digests-*")
	if err != nil {
		return dc
	}
	w := digestWriter{dc: dc, f: f}
	prev := digestCursor{dc: old}
	k := 0 // seen and ch.Entries are both sorted by path bytes
	for i := range ch.Entries {
		e := &ch.Entries[i]
		if e.New == nil || e.New.Type != attest.File || len(e.New.SHA256) != 32 || unstable[e.Path] {
			continue
		}
		for k < len(seen) && seen[k].path < e.Path {
			k++
		}
		var st probe.Stat
		if k < len(seen) && seen[k].path == e.Path {
			st = seen[k].st
		} else {
			ost, sum, ok := prev.seek(e.Path)
			if !ok || !bytes.Equal(sum, e.New.SHA256) {
				continue
			}
			st = ost
		}
		w.add(e.Path, st, e.New.SHA256)
	}
	if !w.finish() {
		f.Close()
		os.Remove(f.Name())
		return &digestCache{}
	}
	dc.file = f
	return dc
}

// digestWriter writes a cache's records a block at a time.
type digestWriter struct {
	dc    *digestCache
	f     *os.File
	buf   []byte
	first string
	off   int64
	err   error
}

func (w *digestWriter) add(p attest.Path, st probe.Stat, sum []byte) {
	if len(w.buf) == 0 {
		w.first = string(p)
	}
	b := binary.BigEndian.AppendUint32(w.buf, uint32(len(p)))
	b = append(b, p...)
	b = binary.BigEndian.AppendUint32(b, st.Mode)
	b = binary.BigEndian.AppendUint64(b, st.Ino)
	b = binary.BigEndian.AppendUint64(b, st.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(st.MtimeNS))
	b = binary.BigEndian.AppendUint64(b, uint64(st.CtimeNS))
	w.buf = append(b, sum...)
	if len(w.buf) >= digestBlockSize {
		w.flush()
	}
}

func (w *digestWriter) flush() {
	if len(w.buf) == 0 || w.err != nil {
		return
	}
	if _, w.err = w.f.WriteAt(w.buf, w.off); w.err == nil {
		w.dc.blocks = append(w.dc.blocks, digestBlock{first: w.first, off: w.off, size: int64(len(w.buf)), sum: sha256.Sum256(w.buf)})
		w.off += int64(len(w.buf))
	}
	w.buf = w.buf[:0]
}

// finish writes the last block; false when a write failed.
func (w *digestWriter) finish() bool {
	w.flush()
	w.dc.blocks = slices.Clip(w.dc.blocks)
	return w.err == nil
}

// lookup returns the digest kept for p when st is exactly the stat it was
// hashed with, nil otherwise.
func (dc *digestCache) lookup(p attest.Path, st overlay.FileStat) []byte {
	s, sum, ok := dc.find(p)
	if !ok || s != probe.Stat(st) {
		return nil
	}
	return sum
}

// find returns the record of p: its stat and digest (a copy).
func (dc *digestCache) find(p attest.Path) (probe.Stat, []byte, bool) {
	if dc == nil {
		return probe.Stat{}, nil, false
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.failed || dc.file == nil {
		return probe.Stat{}, nil, false
	}
	// The last block whose first path is at or before p.
	i, found := slices.BinarySearchFunc(dc.blocks, string(p), func(b digestBlock, p string) int { return strings.Compare(b.first, p) })
	if !found {
		i--
	}
	if i < 0 {
		return probe.Stat{}, nil, false
	}
	lb := dc.load(i)
	if lb == nil {
		return probe.Stat{}, nil, false
	}
	j, found := slices.BinarySearchFunc(lb.recs, string(p), func(r int32, p string) int {
		n := int32(binary.BigEndian.Uint32(lb.b[r:]))
		return bytes.Compare(lb.b[r+4:r+4+n], []byte(p))
	})
	if !found {
		return probe.Stat{}, nil, false
	}
	r := lb.b[lb.recs[j]+4+int32(len(p)):]
	return recordStat(r), slices.Clone(r[36:68]), true
}

// digestCursor reads a cache's records in order, for lookups in path
// order: each block is read once.
type digestCursor struct {
	dc  *digestCache
	bi  int // the block lb is, or the next to read
	lb  *loadedBlock
	ri  int // the next record of lb
	end bool
}

// seek returns the record of p, which must not sort before a path sought
// earlier: its stat and digest (which is only valid until the next seek).
func (c *digestCursor) seek(p attest.Path) (probe.Stat, []byte, bool) {
	for !c.end {
		if c.lb == nil || c.ri == len(c.lb.recs) {
			if c.dc == nil || c.dc.file == nil || c.bi == len(c.dc.blocks) {
				c.end = true
				break
			}
			c.dc.mu.Lock()
			c.lb = c.dc.read(c.bi)
			c.dc.mu.Unlock()
			c.bi, c.ri = c.bi+1, 0
			if c.lb == nil {
				c.end = true
				break
			}
		}
		b := c.lb.b[c.lb.recs[c.ri]:]
		n := binary.BigEndian.Uint32(b)
		q := b[4 : 4+n]
		if string(q) > string(p) {
			break
		}
		c.ri++
		if string(q) == string(p) {
			return recordStat(b[4+n:]), b[4+n+36 : 4+n+68], true
		}
	}
	return probe.Stat{}, nil, false
}

func recordStat(r []byte) probe.Stat {
	return probe.Stat{Mode: binary.BigEndian.Uint32(r), Ino: binary.BigEndian.Uint64(r[4:]), Size: binary.BigEndian.Uint64(r[12:]),
		MtimeNS: int64(binary.BigEndian.Uint64(r[20:])), CtimeNS: int64(binary.BigEndian.Uint64(r[28:]))}
}

// load returns block i, read back and checked, or nil (and the cache
// failed) when it is not as written; dc.mu is held.
func (dc *digestCache) load(i int) *loadedBlock {
	for k, lb := range dc.recent {
		if lb.i == i {
			copy(dc.recent[1:k+1], dc.recent[:k])
			dc.recent[0] = lb
			return lb
		}
	}
	lb := dc.read(i)
	if lb == nil {
		return nil
	}
	if len(dc.recent) < digestRecent {
		dc.recent = append(dc.recent, nil)
	}
	copy(dc.recent[1:], dc.recent)
	dc.recent[0] = lb
	return lb
}

// read reads block i back and checks it; nil (and the cache failed)
// when it is not as written. dc.mu is held.
func (dc *digestCache) read(i int) *loadedBlock {
	if dc.failed {
		return nil
	}
	bl := &dc.blocks[i]
	b := make([]byte, bl.size)
	if _, err := dc.file.ReadAt(b, bl.off); err != nil || sha256.Sum256(b) != bl.sum {
		dc.failed = true
		return nil
	}
	lb := &loadedBlock{i: i, b: b}
	for off := 0; off < len(b); {
		lb.recs = append(lb.recs, int32(off))
		off += digestRecFixed + int(binary.BigEndian.Uint32(b[off:]))
	}
	return lb
}

// close removes the cache's file; lookups answer nothing after it.
func (dc *digestCache) close() {
	if dc == nil {
		return
	}
	dc.unlink()
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.file != nil {
		dc.file.Close()
		dc.file = nil
	}
	dc.recent = nil
}

// unlink removes the cache's file name but keeps it open, so lookups
// still answer; the file goes when the cache does.
func (dc *digestCache) unlink() {
	if dc == nil {
		return
	}
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.file != nil {
		os.Remove(dc.file.Name())
	}
}

// Bytes is the memory the cache holds: the block records and the blocks
// read last.
func (dc *digestCache) Bytes() int {
	if dc == nil {
		return 0
	}
	n := cap(dc.blocks) * int(unsafe.Sizeof(digestBlock{}))
	for _, b := range dc.blocks {
		n += len(b.first)
	}
	for _, lb := range dc.recent {
		n += cap(lb.b) + 4*cap(lb.recs)
	}
	return n
}
