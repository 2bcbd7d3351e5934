package layerseal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/probe"
)

// stateEnv is a checkpointer that has taken one checkpoint over 30 files
// in three directories, and the size of those files.
func stateEnv(t *testing.T) (*cpEnv, uint64) {
	e := newCPEnv(t)
	size := e.write30()
	e.settle()
	e.take()
	return e, size
}

// write30 writes 30 files in three directories and returns their size.
func (e *cpEnv) write30() uint64 {
	var size uint64
	for i := range 30 {
		v := fmt.Sprint("v", i)
		e.write(fmt.Sprintf("d%d/f%d", i%3, i), v)
		size += uint64(len(v))
	}
	return size
}

// stateFile returns the one file of the state dir whose name matches
// pattern.
func stateFile(t *testing.T, e *cpEnv, pattern string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(filepath.Dir(e.cp.changes), pattern))
	if len(names) != 1 {
		t.Fatalf("state files %q, want one", names)
	}
	return names[0]
}

// flipLastByte changes the last byte of the file at p in place (the
// checkpointer holds it open: it sees the change).
func flipLastByte(t *testing.T, p string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		t.Fatalf("%s: %v, size %d", p, err, fi.Size())
	}
	b := []byte{0}
	if _, err := f.ReadAt(b, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, fi.Size()-1); err != nil {
		t.Fatal(err)
	}
}

// incremental reports whether the next checkpoint that walks could take
// the unchanged subtrees from the last one: whether the probe of the last
// checkpoint can still say what changed.
func (e *cpEnv) incremental() bool {
	e.t.Helper()
	idx, err := probe.Scan(e.upper, probe.ScanOptions{Dir: e.t.TempDir()})
	if err != nil {
		e.t.Fatal(err)
	}
	defer idx.Close()
	_, ok := e.cp.changedSince(idx)
	return ok
}

// finalMatchesScratch checks that the final statement, reusing what the
// checkpoints left, is the one computed from scratch and hashed want bytes.
func (e *cpEnv) finalMatchesScratch(want uint64, when string) {
	e.t.Helper()
	known, _ := e.cp.final()
	for _, pattern := range []string{".probe-*", ".digests-*"} {
		if names, _ := filepath.Glob(filepath.Join(filepath.Dir(e.cp.changes), pattern)); len(names) != 0 {
			e.t.Errorf("%s: %q left in the state dir at the session's end", when, names)
		}
	}
	reused, err := e.cp.r.statement(known, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	scratch, err := e.cp.r.statement(nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	r1, _ := attest.MerkleRoot(reused.Entries)
	r2, _ := attest.MerkleRoot(scratch.Entries)
	if !bytes.Equal(r1, r2) {
		e.t.Errorf("%s: the final statement differs from the one computed from scratch", when)
	}
	if reused.Stats.BytesHashed != want {
		e.t.Errorf("%s: the final walk hashed %d bytes, want %d", when, reused.Stats.BytesHashed, want)
	}
}

// TestCheckpointProbeFile: the probe's listings are read back only as
// written. One changed on disk makes the next checkpoint walk from
// scratch, with the same result; a removed name changes nothing, as the
// file is held open. Without the check, the control's verdict would hold
// for the corrupt file too.
func TestCheckpointProbeFile(t *testing.T) {
	e, _ := stateEnv(t)
	// A change in every directory: each listing is read back.
	for _, p := range []string{"n", "d0/n", "d1/n", "d2/n"} {
		e.write(p, "n")
	}
	e.settle()
	if !e.incremental() {
		t.Fatal("control: the probe of the last checkpoint cannot say what changed")
	}
	flipLastByte(t, stateFile(t, e, ".probe-*"))
	if e.incremental() {
		t.Fatal("a probe listing changed on disk was used")
	}
	e.write("d1/f4", "changed")
	e.write("new", "new")
	e.settle()
	e.matchesFreshRead(e.take(), "after a corrupt probe file")

	// The new checkpoint kept a new probe file; the old one is gone.
	p := stateFile(t, e, ".probe-*")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if !e.incremental() {
		t.Error("a probe file held open no longer says what changed once its name is removed")
	}
	e.write("d2/f5", "changed")
	e.settle()
	e.matchesFreshRead(e.take(), "after the probe file's name was removed")
	e.finalMatchesScratch(0, "after the probe file's name was removed")
}

// TestCheckpointDigestFile: a digest block changed on disk is never
// trusted: the final walk hashes every file again and signs what a walk
// from scratch signs. The control hashes only what changed.
func TestCheckpointDigestFile(t *testing.T) {
	e, _ := stateEnv(t)
	e.write("new", "new")
	e.finalMatchesScratch(3, "control")

	e, size := stateEnv(t)
	flipLastByte(t, stateFile(t, e, ".digests-*")) // the last file's digest
	e.write("new", "new")
	e.finalMatchesScratch(size+3, "after a corrupt digest block")

	// A removed name changes nothing: the file is held open.
	e, _ = stateEnv(t)
	if err := os.Remove(stateFile(t, e, ".digests-*")); err != nil {
		t.Fatal(err)
	}
	e.write("new", "new")
	e.finalMatchesScratch(3, "after the digest file's name was removed")
}

// checkNothingKept checks a session whose state dir cannot take the
// probe, digest and changes files: every checkpoint that walks does so
// from scratch and lists every change, each is right, and so is the final
// statement, which hashes every file.
func checkNothingKept(t *testing.T, e *cpEnv) {
	t.Helper()
	size := e.write30()
	e.settle()
	e.matchesFreshRead(e.take(), "first checkpoint")
	e.settle()
	if res := e.take(); !res.Unchanged {
		t.Errorf("idle checkpoint %d walked", res.Seq)
	}
	e.write("d1/f4", "changed")
	e.settle()
	if e.incremental() {
		t.Error("a probe whose file could not be written was used to say what changed")
	}
	c, _ := e.matchesFreshRead(e.take(), "after a change")
	if c.Base != 0 || uint64(len(c.Entries)) != c.Count {
		t.Errorf("checkpoint lists %d of %d changes since checkpoint %d; want all of them", len(c.Entries), c.Count, c.Base)
	}
	e.write("new", "new")
	e.finalMatchesScratch(size-2+uint64(len("changed"))+3, "final")
}

// TestCheckpointStateDirMissing: the state dir is gone (its files cannot
// be made).
func TestCheckpointStateDirMissing(t *testing.T) {
	e := newCPEnv(t)
	e.cp.changes = filepath.Join(t.TempDir(), "missing", checkpointChangesFile)
	checkNothingKept(t, e)
}

// TestCheckpointStateDirFull: the state dir's filesystem is full: files
// are made but cannot be written.
func TestCheckpointStateDirFull(t *testing.T) {
	privtest.Require(t)
	e := newCPEnv(t)
	state := t.TempDir()
	if err := unix.Mount("tmpfs", state, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(state, unix.MNT_DETACH) })
	err := os.WriteFile(filepath.Join(state, "fill"), make([]byte, 1<<20), 0o600)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("filling the state dir: %v, want ENOSPC", err)
	}
	e.cp.changes = filepath.Join(state, checkpointChangesFile)
	checkNothingKept(t, e)
}
