package layerseal

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// cpEnv is a checkpointer over plain directories standing in for the
// layers: the test writes into upper as an agent's writes would land.
type cpEnv struct {
	t            *testing.T
	upper, lower string
	cp           *checkpointer
	walks        atomic.Int64
	pub          attest.PublicKey
}

func newCPEnv(t *testing.T) *cpEnv {
	t.Helper()
	root := t.TempDir()
	e := &cpEnv{t: t, upper: filepath.Join(root, "upper"), lower: filepath.Join(root, "lower")}
	for _, d := range []string{e.upper, e.lower, filepath.Join(root, "work"), filepath.Join(root, "out")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	key, err := attest.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	e.pub = key.Public()
	dir, err := makeCheckpointDir(filepath.Join(root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := newReader(e.upper, filepath.Join(root, "work"), e.lower, nil, fillPolicy(attest.Policy{}), false)
	if err != nil {
		t.Fatal(err)
	}
	e.cp = &checkpointer{r: r, key: key, dir: dir, changes: filepath.Join(root, checkpointChangesFile)}
	e.cp.base.SessionID, e.cp.base.Launch, e.cp.base.Workspace = attest.NewSessionID(), sha([]byte("launch")), attest.Bytes(e.lower)
	e.cp.readHook = func() { e.walks.Add(1) }
	return e
}

func (e *cpEnv) write(name, content string) {
	e.t.Helper()
	p := filepath.Join(e.upper, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *cpEnv) take() *CheckpointResult {
	e.t.Helper()
	res, err := e.cp.take()
	if err != nil {
		e.t.Fatalf("checkpoint: %v", err)
	}
	return res
}

// settle waits until every file written so far is out of the racy window.
func (e *cpEnv) settle() { time.Sleep(3 * probe.RacyWindow()) }

// entry returns the change for path p in checkpoint seq.
func (e *cpEnv) entry(seq uint64, p attest.Path) *attest.Entry {
	e.t.Helper()
	_, all := e.changesAt(seq)
	for i := range all {
		if all[i].Path == p {
			return &all[i]
		}
	}
	return nil
}

// changesAt verifies the chain up to checkpoint seq and returns that
// checkpoint and all its changes.
func (e *cpEnv) changesAt(seq uint64) (*attest.Checkpoint, []attest.Entry) {
	e.t.Helper()
	cps, all, err := attest.VerifyChain(readChain(e.t, e.cp.dir, int(seq)), e.pub, nil)
	if err != nil {
		e.t.Fatalf("chain up to checkpoint %d: %v", seq, err)
	}
	return cps[seq-1], all
}

func readChain(t *testing.T, dir string, n int) [][]byte {
	t.Helper()
	var envs [][]byte
	for i := 1; i <= n; i++ {
		b, err := os.ReadFile(filepath.Join(dir, attest.CheckpointFile(uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, b)
	}
	return envs
}

func TestCheckpointIdleReadsNothing(t *testing.T) {
	e := newCPEnv(t)
	for i := range 50 {
		e.write(fmt.Sprintf("d%d/f%d", i%5, i), fmt.Sprint("content ", i))
	}
	e.settle()
	if res := e.take(); res.Unchanged || res.Count != 56 || res.Hashed == 0 {
		t.Fatalf("first checkpoint: %+v", res)
	}
	e.settle()
	for range 3 {
		res := e.take()
		if !res.Unchanged || res.Hashed != 0 || res.Count != 56 {
			t.Fatalf("idle checkpoint: %+v", res)
		}
	}
	if n := e.walks.Load(); n != 1 {
		t.Errorf("%d walks of the upper layer, want 1 (idle checkpoints read nothing)", n)
	}
	// A change ends the run of unchanged checkpoints and is hashed alone.
	e.write("d1/f1", "changed!!")
	e.settle()
	res := e.take()
	if res.Unchanged || res.Hashed != uint64(len("changed!!")) {
		t.Errorf("checkpoint after one change: %+v (want only that file hashed)", res)
	}
	if ent := e.entry(res.Seq, "d1/f1"); ent == nil || !bytes.Equal(ent.New.SHA256, sha([]byte("changed!!"))) {
		t.Errorf("checkpoint does not hold the new content: %+v", ent)
	}
	// It lists that change alone, as its difference from checkpoint 1.
	if c, _ := e.changesAt(res.Seq); c.Base != 1 || len(c.Entries) != 1 || c.Entries[0].Path != "d1/f1" || len(c.Removed) != 0 || c.Count != 56 {
		t.Errorf("checkpoint %d lists %d entries and %d removed paths since checkpoint %d (count %d); want d1/f1 alone since 1",
			res.Seq, len(c.Entries), len(c.Removed), c.Base, c.Count)
	}
	verifyDir(t, e.cp.dir, e.pub, int(res.Seq))
}

func verifyDir(t *testing.T, dir string, pub attest.PublicKey, n int) []*attest.Checkpoint {
	t.Helper()
	cps, _, err := attest.VerifyChain(readChain(t, dir, n), pub, nil)
	if err != nil {
		t.Fatalf("chain: %v", err)
	}
	return cps
}

// TestCheckpointCatchesHiddenWrites: writes that keep size (and mtime)
// are caught, however soon after a checkpoint they come.
func TestCheckpointCatchesHiddenWrites(t *testing.T) {
	e := newCPEnv(t)
	e.write("racy", "AAAA")
	e.write("restored", "BBBB")
	e.write("renamed", "CCCC")
	e.settle()
	e.take()

	// Same size, right after the checkpoint, within its clock tick.
	e.write("racy", "aaaa")
	// Same size, then the old mtime restored with utimensat.
	fi, _ := os.Lstat(filepath.Join(e.upper, "restored"))
	e.write("restored", "bbbb")
	ts := []unix.Timespec{unix.NsecToTimespec(fi.ModTime().UnixNano()), unix.NsecToTimespec(fi.ModTime().UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(e.upper, "restored"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	// Same size and mtime, replaced by rename.
	fi, _ = os.Lstat(filepath.Join(e.upper, "renamed"))
	e.write("tmp", "cccc")
	ts = []unix.Timespec{unix.NsecToTimespec(fi.ModTime().UnixNano()), unix.NsecToTimespec(fi.ModTime().UnixNano())}
	unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(e.upper, "tmp"), ts, 0)
	if err := os.Rename(filepath.Join(e.upper, "tmp"), filepath.Join(e.upper, "renamed")); err != nil {
		t.Fatal(err)
	}
	res := e.take()
	if res.Unchanged {
		t.Fatal("checkpoint after same-size writes says unchanged")
	}
	for p, want := range map[attest.Path]string{"racy": "aaaa", "restored": "bbbb", "renamed": "cccc"} {
		if ent := e.entry(res.Seq, p); ent == nil || !bytes.Equal(ent.New.SHA256, sha([]byte(want))) {
			t.Errorf("%s: checkpoint holds %+v, want the digest of %q", p, ent, want)
		}
	}
}

func TestCheckpointUnstableFile(t *testing.T) {
	e := newCPEnv(t)
	e.write("busy", "0000000000")
	e.write("calm", "calm")
	f, err := os.OpenFile(filepath.Join(e.upper, "busy"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stop atomic.Bool
	var written atomic.Int64 // versions of busy written so far
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); !stop.Load(); i++ {
			f.WriteAt([]byte(fmt.Sprintf("%010d", i)), 0)
			written.Store(i)
		}
	}()
	// On a loaded machine the writer may get no time during a checkpoint;
	// the file is then not changing and a complete checkpoint is right,
	// provided its digest is one whole version. Some checkpoint must catch
	// the writer at work.
	var res *CheckpointResult
	var reasons []attest.Reason // res's, less the one a kernel without mount IDs adds
	for attempt := 0; attempt < 20; attempt++ {
		time.Sleep(10 * time.Millisecond)
		lo := written.Load()
		res = e.take()
		hi := written.Load()
		if res.Unchanged {
			continue
		}
		reasons = e.reasons(res.Seq)
		if len(reasons) > 0 {
			break
		}
		ent := e.entry(res.Seq, "busy")
		if ent == nil || ent.New == nil {
			t.Fatalf("checkpoint %d lists no busy", res.Seq)
		}
		whole := false
		for i := lo; i <= hi+1 && !whole; i++ { // hi+1: written, not yet counted
			sum := sha256.Sum256([]byte(fmt.Sprintf("%010d", i)))
			whole = bytes.Equal(ent.New.SHA256, sum[:])
		}
		if !whole {
			t.Fatalf("complete checkpoint %d holds a digest of no version written between %d and %d", res.Seq, lo, hi)
		}
	}
	stop.Store(true)
	wg.Wait()
	if len(reasons) != 1 || reasons[0].Code != attest.Unstable || reasons[0].Path != "busy" {
		t.Fatalf("reasons %+v after 20 checkpoints of a file rewritten throughout, want one unstable for busy", reasons)
	}
	if ent := e.entry(res.Seq, "calm"); ent == nil {
		t.Error("the calm file is missing")
	}
	// Once the writer stopped, the next checkpoint reads it again even
	// if the probe saw nothing new.
	e.settle()
	if res := e.take(); res.Unchanged || len(e.reasons(res.Seq)) != 0 {
		t.Errorf("checkpoint after the writer stopped: %+v", res)
	}
}

// reasons returns checkpoint seq's incomplete reasons, less the no-mount-id
// reason every checkpoint has on a kernel without statx mount IDs.
func (e *cpEnv) reasons(seq uint64) []attest.Reason {
	e.t.Helper()
	env, err := os.ReadFile(filepath.Join(e.cp.dir, attest.CheckpointFile(seq)))
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := attest.VerifyCheckpoint(env, e.pub)
	if err != nil {
		e.t.Fatalf("checkpoint %d: %v", seq, err)
	}
	var out []attest.Reason
	for _, r := range c.Incomplete {
		if r.Code == attest.NoMountID && !e.mountIDs() {
			continue
		}
		out = append(out, r)
	}
	return out
}

// mountIDs tells whether this kernel reports statx mount IDs.
func (e *cpEnv) mountIDs() bool {
	st, err := linux.Lstat(unix.AT_FDCWD, e.upper)
	return err == nil && st.HasMountID
}

// TestFinalReusesDigests: the final statement reusing checkpoint digests
// is identical to one computed from scratch, and hashes less.
func TestFinalReusesDigests(t *testing.T) {
	e := newCPEnv(t)
	for i := range 20 {
		e.write(fmt.Sprintf("f%02d", i), fmt.Sprint("x", i))
	}
	e.settle()
	e.take()
	e.write("f03", "y3") // same size as before, after the checkpoint
	e.write("new", "new")
	known, head := e.cp.final()
	if head == nil {
		t.Fatal("no chain head")
	}
	reused, err := e.cp.r.statement(known, nil)
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := e.cp.r.statement(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := attest.MerkleRoot(reused.Entries)
	r2, _ := attest.MerkleRoot(scratch.Entries)
	if !bytes.Equal(r1, r2) || len(reused.Entries) != 22 {
		t.Errorf("reused statement differs from the one computed from scratch (%d vs %d entries)", len(reused.Entries), len(scratch.Entries))
	}
	if want := uint64(len("y3") + len("new")); reused.Stats.BytesHashed != want {
		t.Errorf("final walk hashed %d bytes, want %d (only what changed after the checkpoint)", reused.Stats.BytesHashed, want)
	}
}

// TestCheckpointIncrementalMatchesFresh: checkpoints after random writes,
// removals and new directories take unchanged subtrees from the previous
// checkpoint, hash only what changed, and list exactly what a fresh read
// of the same layers lists.
func TestCheckpointIncrementalMatchesFresh(t *testing.T) {
	e := newCPEnv(t)
	rng := rand.New(rand.NewPCG(7, 7))
	var names []string
	for i := range 60 {
		n := fmt.Sprintf("d%d/f%d", i%6, i)
		e.write(n, fmt.Sprint("v0 ", i))
		names = append(names, n)
	}
	e.settle()
	e.take()
	for round := range 8 {
		for range 1 + rng.IntN(5) {
			i := rng.IntN(len(names))
			switch rng.IntN(4) {
			case 0:
				os.Remove(filepath.Join(e.upper, names[i]))
			case 1:
				n := fmt.Sprintf("n%d/g%d", rng.IntN(3), rng.IntN(1000))
				e.write(n, "new")
				names = append(names, n)
			default:
				e.write(names[i], fmt.Sprint("v", round+1, " ", i))
			}
		}
		e.settle()
		res := e.take()
		if res.Unchanged {
			t.Fatalf("round %d: changes not seen", round)
		}
		if res.Hashed >= 60*4 {
			t.Fatalf("round %d: hashed %d bytes: not incremental", round, res.Hashed)
		}
		e.matchesFreshRead(res, fmt.Sprintf("round %d", round))
	}
}

// TestCheckpointChangesFile: the changes a walked checkpoint leaves for
// the next one are used only when they are exactly the ones it signed;
// any other file makes the next checkpoint walk from scratch, and its
// result is the same.
func TestCheckpointChangesFile(t *testing.T) {
	e := newCPEnv(t)
	for i := range 30 {
		e.write(fmt.Sprintf("d%d/f%d", i%3, i), fmt.Sprint("v", i))
	}
	e.settle()
	first := e.take()
	prev := e.cp.previous()
	if prev == nil || uint64(len(prev.entries)) != first.Count {
		t.Fatalf("changes of checkpoint %d not read back: %+v", first.Seq, prev)
	}
	good, err := os.ReadFile(e.cp.changes)
	if err != nil {
		t.Fatal(err)
	}
	// d2/f29 renamed d2/f28 keeps the entries in order: only the
	// file's digest can tell.
	at := bytes.LastIndex(good, []byte("d2/f29")) + len("d2/f2")
	for name, b := range map[string][]byte{
		"other seq":     append(append([]byte(changesTag), 0, 0, 0, 0, 0, 0, 0, 9), good[len(changesTag)+8:]...),
		"path changed":  append(append(slices.Clone(good[:at]), '8'), good[at+1:]...),
		"trailing byte": append(slices.Clone(good), 0),
		"truncated":     good[:len(good)-1],
		"no entries":    append([]byte(changesTag), make([]byte, 16)...),
		"count too big": append(append([]byte(changesTag), good[len(changesTag):len(changesTag)+8]...), append([]byte{0, 0, 0, 0, 0, 0, 0, 99}, good[len(changesTag)+16:]...)...),
	} {
		if err := os.WriteFile(e.cp.changes, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readChangeList(e.cp.changes, first.Seq, e.cp.listSum); err == nil {
			t.Errorf("%s: changes file accepted", name)
		}
		if prev := e.cp.previous(); prev != nil {
			t.Errorf("%s: previous changes used", name)
		}
	}
	e.write("d1/f4", "changed")
	e.write("new", "new")
	e.settle()
	res := e.take()
	c, env := e.matchesFreshRead(res, "after a bad changes file")
	if c.Base != 0 || uint64(len(c.Entries)) != c.Count {
		t.Errorf("checkpoint after a bad changes file lists %d of %d changes since checkpoint %d; want all of them", len(c.Entries), c.Count, c.Base)
	}
	// That checkpoint wrote its own; the session's end removes it.
	if _, err := readChangeList(e.cp.changes, res.Seq, e.cp.listSum); err != nil {
		t.Fatalf("changes of checkpoint %d: %v", res.Seq, err)
	}
	if _, head := e.cp.final(); !bytes.Equal(head, sha(env)) {
		t.Errorf("final head %x, want the SHA-256 of checkpoint %d", head, res.Seq)
	}
	if _, err := os.Stat(e.cp.changes); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("changes file left after the session: %v", err)
	}
}

// matchesFreshRead fails unless checkpoint res lists what a read from
// scratch of the same upper layer gives, and returns the checkpoint and its
// file.
func (e *cpEnv) matchesFreshRead(res *CheckpointResult, when string) (*attest.Checkpoint, []byte) {
	e.t.Helper()
	env, err := os.ReadFile(res.File)
	if err != nil {
		e.t.Fatal(err)
	}
	c, all := e.changesAt(res.Seq)
	want, err := overlay.Read(e.upper, e.lower, overlay.ReadOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if !reflect.DeepEqual(all, want.Entries) {
		e.t.Fatalf("%s: checkpoint stands for %d entries, a fresh read gives %d:\n%+v\nwant\n%+v", when, len(all), len(want.Entries), all, want.Entries)
	}
	return c, env
}

// TestCheckpointCatchesMappedWrites: a write through a shared mapping
// whose page is already dirty stamps no time. Each checkpoint writes
// back the upper layer's pages first, so the next write through the
// mapping stamps ctime and is caught, by a later checkpoint and by the
// final walk. Where the filesystem stamps no write through a mapping at
// all (tmpfs), every checkpoint walks and hashes everything instead.
func TestCheckpointCatchesMappedWrites(t *testing.T) {
	checkMappedWrites(t, newCPEnv(t))
}

// TestCheckpointMappedWritesOnTmpfs: the same with the upper layer on
// tmpfs, which never stamps a write through a mapping.
func TestCheckpointMappedWritesOnTmpfs(t *testing.T) {
	privtest.Require(t)
	e := newCPEnv(t)
	if err := unix.Mount("tmpfs", e.upper, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(e.upper, unix.MNT_DETACH) })
	if !checkMappedWrites(t, e) {
		t.Error("tmpfs reported to stamp writes through mappings")
	}
	if n := e.walks.Load(); n != 4 {
		t.Errorf("%d walks, want one per checkpoint (4)", n)
	}
}

// checkMappedWrites writes through a shared mapping of an upper file
// between checkpoints and reports whether the checkpointer found that
// the upper layer's filesystem does not stamp such writes.
func checkMappedWrites(t *testing.T, e *cpEnv) (unseen bool) {
	stamped, err := probe.MappedWritesStamped(e.upper)
	if err != nil {
		t.Fatal(err)
	}
	e.cp.mappedUnseen = !stamped
	p := filepath.Join(e.upper, "mapped")
	e.write("mapped", string(make([]byte, 4096)))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	holds := func(seq uint64, when string) {
		t.Helper()
		want, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if ent := e.entry(seq, "mapped"); ent == nil || !bytes.Equal(ent.New.SHA256, sha(want)) {
			t.Errorf("%s: checkpoint %d does not hold the mapped file's content %q…", when, seq, want[:4])
		}
	}
	m[0] = 'A'
	e.settle()
	holds(e.take().Seq, "first write")
	for i, b := range []byte("BCD") {
		// The page is dirty and was mapped writable before the
		// checkpoint; this write stamps a time only if the checkpoint
		// wrote the page back.
		m[1+i] = b
		e.settle()
		res := e.take()
		if res.Unchanged {
			t.Fatalf("write %d through the mapping: checkpoint %d says unchanged", i+2, res.Seq)
		}
		holds(res.Seq, fmt.Sprintf("write %d", i+2))
	}
	// The final walk does not take the last digest for a file written
	// through the mapping since.
	m[4] = 'E'
	e.settle()
	known, _ := e.cp.final()
	st, err := linux.Lstat(unix.AT_FDCWD, p)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := os.ReadFile(p)
	if sum := known("mapped", overlay.FileStat{Mode: st.Mode, Ino: st.Ino, Size: st.Size, MtimeNS: st.MtimeNS, CtimeNS: st.CtimeNS}); sum != nil && !bytes.Equal(sum, sha(now)) {
		t.Errorf("final walk offered the digest of an older content of the mapped file")
	}
	return !stamped
}

// TestCheckpointWriteFailureEndsChain: a checkpoint signed but not
// written ends the chain there: no later checkpoint is taken, and the
// final statement binds the last one written, so the chain on disk
// verifies.
func TestCheckpointWriteFailureEndsChain(t *testing.T) {
	e := newCPEnv(t)
	e.write("a", "a")
	e.settle()
	first := e.take()
	if err := os.Rename(e.cp.dir, e.cp.dir+".away"); err != nil {
		t.Fatal(err)
	}
	e.write("b", "b")
	e.settle()
	if _, err := e.cp.take(); err == nil {
		t.Fatal("checkpoint written into a missing directory")
	}
	if err := os.Rename(e.cp.dir+".away", e.cp.dir); err != nil {
		t.Fatal(err)
	}
	if res, err := e.cp.take(); err == nil {
		t.Fatalf("checkpoint %d taken after one was lost", res.Seq)
	}
	_, head := e.cp.final()
	env, err := os.ReadFile(first.File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head, sha(env)) {
		t.Errorf("final head is not checkpoint %d, the last written", first.Seq)
	}
	verifyDir(t, e.cp.dir, e.pub, int(first.Seq))
	if names, _ := filepath.Glob(filepath.Join(e.cp.dir, "*.json")); len(names) != 2 {
		t.Errorf("checkpoint files %v, want only the first and its head", names)
	}
}

// TestCheckpointHead: every checkpoint gets a signed head beside it, the
// head of the checkpoint as it verifies; a head that cannot be written is
// reported and costs neither the checkpoint nor the chain.
func TestCheckpointHead(t *testing.T) {
	e := newCPEnv(t)
	e.write("a", "a")
	e.settle()
	if err := os.Mkdir(filepath.Join(e.cp.dir, attest.HeadFile(attest.CheckpointFile(2))), 0o755); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if seq > 1 {
			e.write(fmt.Sprint(seq), "x")
			e.settle()
		}
		res := e.take()
		if res.Seq != seq {
			t.Fatalf("checkpoint %d, want %d", res.Seq, seq)
		}
		if seq == 2 {
			if !strings.Contains(res.HeadProblem, "checkpoint 2 is written, but not its signed head") {
				t.Fatalf("head of checkpoint 2 written into a directory: problem %q", res.HeadProblem)
			}
			continue
		}
		if res.HeadProblem != "" {
			t.Fatalf("checkpoint %d: %s", seq, res.HeadProblem)
		}
		env, err := os.ReadFile(res.File)
		if err != nil {
			t.Fatal(err)
		}
		c, err := attest.VerifyCheckpoint(env, e.pub)
		if err != nil {
			t.Fatal(err)
		}
		headEnv, err := os.ReadFile(filepath.Join(e.cp.dir, attest.HeadFile(attest.CheckpointFile(seq))))
		if err != nil {
			t.Fatal(err)
		}
		h, err := attest.VerifyHead(headEnv, e.pub)
		if err != nil {
			t.Fatalf("head of checkpoint %d: %v", seq, err)
		}
		if !h.Equal(attest.HeadOfCheckpoint(c)) {
			t.Fatalf("head of checkpoint %d is not the checkpoint's", seq)
		}
	}
	verifyDir(t, e.cp.dir, e.pub, 3)
	// The heads beside the checkpoints are no stray checkpoints.
	if envs, err := attest.ReadChainDir(e.cp.dir); err != nil || len(envs) != 3 {
		t.Fatalf("ReadChainDir beside heads: %d checkpoints, %v", len(envs), err)
	}
}
