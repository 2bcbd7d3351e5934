package tlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/layerseal/layerseal/attest"
)

// The test binary is also the appending child of the process tests:
// TLOG_TEST_CHILD=DIR,SEED,FROM,N appends heads FROM..FROM+N-1 of SEED.
func TestMain(m *testing.M) {
	if c := os.Getenv("TLOG_TEST_CHILD"); c != "" {
		os.Exit(child(c))
	}
	os.Exit(m.Run())
}

func child(spec string) int {
	f := strings.Split(spec, ",")
	from, _ := strconv.Atoi(f[2])
	n, _ := strconv.Atoi(f[3])
	s, err := attest.LoadPrivateKey(f[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	l, err := Open(ctx, f[0], Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := from; i < from+n; i++ {
		wg.Go(func() {
			if _, err := l.Append(ctx, headBytes(s, i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := l.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// headBytes is the signed head number i: distinct for each i.
func headBytes(s *attest.Signer, i int) []byte {
	h := &attest.Head{Kind: attest.HeadKindStatement, SessionID: fmt.Sprintf("%032x", i), Launch: bytes.Repeat([]byte{1}, 32),
		Alg: attest.AlgEd25519, Root: bytes.Repeat([]byte{2}, 32), AppliedRoot: bytes.Repeat([]byte{2}, 32), Count: uint64(i), AppliedCount: uint64(i), Complete: true}
	b, err := attest.SignHead(s, h)
	if err != nil {
		panic(err)
	}
	return b
}

type fixture struct {
	dir, logKey, sealKey string
	verifier             note.Verifier
	signer               *attest.Signer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	tmp := t.TempDir()
	f := &fixture{dir: filepath.Join(tmp, "log"), logKey: filepath.Join(tmp, "log.key"), sealKey: filepath.Join(tmp, "seal.key")}
	vkey, err := GenerateKey(f.logKey, "test.example/log")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InitPOSIX(context.Background(), f.dir, f.logKey); err != nil {
		t.Fatal(err)
	}
	if f.verifier, err = note.NewVerifier(vkey); err != nil {
		t.Fatal(err)
	}
	if _, err := attest.GenerateKey(attest.AlgEd25519, f.sealKey, f.sealKey+".pub"); err != nil {
		t.Fatal(err)
	}
	if f.signer, err = attest.LoadPrivateKey(f.sealKey); err != nil {
		t.Fatal(err)
	}
	return f
}

// appendHeads appends heads from..to-1 in this process.
func (f *fixture) appendHeads(t *testing.T, dir string, from, to int) {
	t.Helper()
	ctx := context.Background()
	l, err := Open(ctx, dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		wg.Go(func() {
			if _, err := l.Append(ctx, headBytes(f.signer, i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) reader(t *testing.T, loc string) *Reader {
	t.Helper()
	r, err := OpenReader(loc, f.verifier)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReceiptVerifiesAndTamperingFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l, err := Open(ctx, f.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	var entry []byte
	var idx uint64
	for i := range 5 {
		e := headBytes(f.signer, i)
		n, err := l.Append(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			entry, idx = e, n
		}
	}
	r, err := Prove(ctx, l, idx, entry)
	if err != nil {
		t.Fatal(err)
	}
	file := r.Marshal()
	back, err := ParseReceipt(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyReceipt(back, entry, f.verifier, nil, 0); err != nil {
		t.Fatalf("a fresh receipt: %v", err)
	}
	// Too few witnesses.
	wv := witnessKey(t).Verifier()
	if _, err := VerifyReceipt(back, entry, f.verifier, []note.Verifier{wv}, 1); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("no cosignature but one required: %v", err)
	}
	// Another entry.
	if _, err := VerifyReceipt(back, headBytes(f.signer, 3), f.verifier, nil, 0); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("receipt of another head: %v", err)
	}
	// Every field tampered with.
	tamper := map[string]func(*Receipt){
		"index":       func(r *Receipt) { r.Index ^= 1 },
		"proof hash":  func(r *Receipt) { r.Proof[0][5] ^= 1 },
		"proof short": func(r *Receipt) { r.Proof = r.Proof[1:] },
		"entry":       func(r *Receipt) { r.Entry[0] ^= 1 },
		"origin":      func(r *Receipt) { r.Origin = "other.example/log" },
		"checkpoint size": func(r *Receipt) {
			r.Checkpoint = bytes.Replace(r.Checkpoint, []byte("\n5\n"), []byte("\n6\n"), 1)
		},
		"checkpoint signature": func(r *Receipt) {
			i := bytes.LastIndexByte(r.Checkpoint[:len(r.Checkpoint)-1], ' ')
			r.Checkpoint[i+5] ^= 1
		},
	}
	for name, fn := range tamper {
		r2, _ := ParseReceipt(file)
		fn(r2)
		if _, err := VerifyReceipt(r2, entry, f.verifier, nil, 0); !errors.Is(err, ErrNotVerified) {
			t.Errorf("tampered %s: %v, want not verified", name, err)
		}
	}
	// The file's form.
	for name, b := range map[string][]byte{
		"unknown member": bytes.Replace(file, []byte(`{"format"`), []byte(`{"x":1,"format"`), 1),
		"duplicate":      bytes.Replace(file, []byte(`"index":"2"`), []byte(`"index":"2","index":"2"`), 1),
		"case variant":   bytes.Replace(file, []byte(`"index"`), []byte(`"Index"`), 1),
		"format":         bytes.Replace(file, []byte("log-receipt/v1"), []byte("log-receipt/v2"), 1),
		"trailing":       append(bytes.Clone(file), '{', '}'),
		"index spelling": bytes.Replace(file, []byte(`"index":"2"`), []byte(`"index":"02"`), 1),
		"upper hex":      bytes.Replace(file, []byte(fmt.Sprintf("%x", back.Entry)), []byte(strings.ToUpper(fmt.Sprintf("%x", back.Entry))), 1),
	} {
		if _, err := ParseReceipt(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func witnessKey(t *testing.T) *fnote.Signer {
	t.Helper()
	p := filepath.Join(t.TempDir(), "w.key")
	if _, err := GenerateKey(p, "test.example/witness"); err != nil {
		t.Fatal(err)
	}
	w, err := LoadCosigner(p)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestCheckFindsRewrittenTileAndBundle(t *testing.T) {
	f := newFixture(t)
	f.appendHeads(t, f.dir, 0, 300) // one full tile and bundle, then partial ones
	ctx := context.Background()
	rep, err := Check(ctx, f.reader(t, f.dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checkpoint.Size != 300 || rep.Heads[f.signer.KeyID()] != 300 {
		t.Fatalf("report %+v", rep)
	}
	for _, file := range []string{"tile/0/000", "tile/entries/000"} {
		t.Run(file, func(t *testing.T) {
			p := filepath.Join(f.dir, file)
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b := bytes.Clone(orig)
			b[len(b)/2] ^= 1
			os.WriteFile(p, b, 0o644)
			defer os.WriteFile(p, orig, 0o644)
			if _, err := Check(ctx, f.reader(t, f.dir), nil); !errors.Is(err, ErrNotVerified) {
				t.Fatalf("rewritten %s: %v", file, err)
			}
		})
	}
	// An entry that is not a head.
	l, err := Open(ctx, f.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, []byte("not a head\n")); err != nil {
		t.Fatal(err)
	}
	l.Close(ctx)
	if _, err := Check(ctx, f.reader(t, f.dir), nil); !errors.Is(err, ErrNotVerified) || !strings.Contains(err.Error(), "entry 300") {
		t.Fatalf("an entry that is not a head: %v", err)
	}
}

// forkOf makes a second log with f's key: the same first entries, then
// others.
func (f *fixture) forkOf(t *testing.T, common, extra int) string {
	dir := filepath.Join(t.TempDir(), "fork")
	if _, err := InitPOSIX(context.Background(), dir, f.logKey); err != nil {
		t.Fatal(err)
	}
	f.appendHeads(t, dir, 0, common)
	f.appendHeads(t, dir, 1000, 1000+extra)
	return dir
}

func TestWitnessRefusesForkAndCheckSinceFindsIt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.appendHeads(t, f.dir, 0, 3)
	w := witnessKey(t)
	state := filepath.Join(t.TempDir(), "state")
	if _, err := Cosign(ctx, f.reader(t, f.dir), w, state); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(state)
	fork := f.forkOf(t, 2, 3) // size 5, sharing 2 entries with the size-3 log
	_, err := Cosign(ctx, f.reader(t, fork), w, state)
	var inc *InconsistentError
	if !errors.As(err, &inc) || inc.OldSize != 3 || inc.NewSize != 5 || !strings.Contains(err.Error(), "size 3 root") {
		t.Fatalf("witness over a fork: %v", err)
	}
	if after, _ := os.ReadFile(state); !bytes.Equal(before, after) {
		t.Fatal("the state changed after a refusal")
	}
	// log check --since the old checkpoint.
	old, _ := f.reader(t, f.dir).Checkpoint(ctx)
	if _, err := Check(ctx, f.reader(t, fork), old.Note); !errors.As(err, &inc) {
		t.Fatalf("check of a fork since its other branch: %v", err)
	}
	// The honest log grown: consistent.
	f.appendHeads(t, f.dir, 3, 7)
	if _, err := Check(ctx, f.reader(t, f.dir), old.Note); err != nil {
		t.Fatal(err)
	}
	c, err := Cosign(ctx, f.reader(t, f.dir), w, state)
	if err != nil || c.Old.Size != 3 || c.New.Size != 7 {
		t.Fatalf("cosign of the grown log: %+v %v", c, err)
	}
}

func TestWitnessDetectsRolledBackState(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.appendHeads(t, f.dir, 0, 2)
	w := witnessKey(t)
	state := filepath.Join(t.TempDir(), "state")
	if _, err := Cosign(ctx, f.reader(t, f.dir), w, state); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(state)
	f.appendHeads(t, f.dir, 2, 4)
	if _, err := Cosign(ctx, f.reader(t, f.dir), w, state); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(state, old, 0o644) // put back
	if _, err := Cosign(ctx, f.reader(t, f.dir), w, state); !errors.Is(err, ErrStateRolledBack) {
		t.Fatalf("rolled-back state: %v", err)
	}
	os.Remove(state) // lost altogether
	if _, err := Cosign(ctx, f.reader(t, f.dir), w, state); !errors.Is(err, ErrStateRolledBack) {
		t.Fatalf("missing state after use: %v", err)
	}
}

func TestURLForm(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.appendHeads(t, f.dir, 0, 260)
	srv := httptest.NewServer(http.FileServer(http.Dir(f.dir)))
	defer srv.Close()
	r := f.reader(t, srv.URL)
	rep, err := Check(ctx, r, nil)
	if err != nil || rep.Checkpoint.Size != 260 {
		t.Fatalf("check over http: %+v %v", rep, err)
	}
	w := witnessKey(t)
	state := filepath.Join(t.TempDir(), "state")
	c, err := Cosign(ctx, r, w, state)
	if err != nil || c.Published != "" {
		t.Fatalf("witness over http: %+v %v", c, err)
	}
	// A receipt proven over http verifies, with the cosignature.
	p, err := r.Inclusion(ctx, 257, c.New.Size)
	if err != nil {
		t.Fatal(err)
	}
	var e []byte
	for ent, err := range r.Entries(ctx, 257, 258, c.New.Size) {
		if err != nil {
			t.Fatal(err)
		}
		e = ent
	}
	rc := &Receipt{Origin: r.Origin(), Index: 257, Entry: sha(e), Proof: p, Checkpoint: c.Note}
	if _, err := VerifyReceipt(rc, e, f.verifier, []note.Verifier{w.Verifier()}, 1); err != nil {
		t.Fatal(err)
	}
}

// TestProcesses: many processes append at once; none is lost or
// duplicated.
func TestProcesses(t *testing.T) {
	procs, each := 50, 20
	if testing.Short() {
		procs, each = 10, 5
	}
	f := newFixture(t)
	start := time.Now()
	var cmds []*exec.Cmd
	for p := range procs {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), fmt.Sprintf("TLOG_TEST_CHILD=%s,%s,%d,%d", f.dir, f.sealKey, p*each, each))
		c.Stderr = os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("appending process: %v", err)
		}
	}
	t.Logf("%d appends from %d processes in %v", procs*each, procs, time.Since(start))
	ctx := context.Background()
	r := f.reader(t, f.dir)
	rep, err := Check(ctx, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checkpoint.Size != uint64(procs*each) {
		t.Fatalf("log of %d entries after %d appends", rep.Checkpoint.Size, procs*each)
	}
	seen := map[string]bool{}
	for e, err := range r.Entries(ctx, 0, rep.Checkpoint.Size, rep.Checkpoint.Size) {
		if err != nil {
			t.Fatal(err)
		}
		seen[string(e)] = true
	}
	for i := range procs * each {
		if !seen[string(headBytes(f.signer, i))] {
			t.Fatalf("head %d lost", i)
		}
	}
}

// TestKilledAppender: a process killed at random points while appending
// leaves a log that checks out and takes appends.
func TestKilledAppender(t *testing.T) {
	kills := 10
	if testing.Short() {
		kills = 4
	}
	f := newFixture(t)
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	for k := range kills {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), fmt.Sprintf("TLOG_TEST_CHILD=%s,%s,%d,%d", f.dir, f.sealKey, k*100000, 400))
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(5+rnd.IntN(150)) * time.Millisecond)
		c.Process.Signal(syscall.SIGKILL)
		c.Wait()
		if _, err := Check(ctx, f.reader(t, f.dir), nil); err != nil {
			t.Fatalf("after kill %d: %v", k, err)
		}
	}
	before, _ := f.reader(t, f.dir).Checkpoint(ctx)
	f.appendHeads(t, f.dir, 900000, 900010)
	rep, err := Check(ctx, f.reader(t, f.dir), before.Note)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log of %d entries after %d kills, then 10 appends", rep.Checkpoint.Size, kills)
	if rep.Checkpoint.Size < before.Size+10 {
		t.Fatalf("size %d after appending 10 to %d", rep.Checkpoint.Size, before.Size)
	}
}

func sha(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

func init() {
	// tessera's progress lines are noise in test output.
	klog.SetLogger(logr.Discard())
}

// TestProveGathersCosignatures: a receipt proven after two witnesses
// cosigned (each publishing its own file) carries both cosignatures.
func TestProveGathersCosignatures(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.appendHeads(t, f.dir, 0, 3)
	w1, w2 := witnessKey(t), witnessKey(t)
	for _, w := range []*fnote.Signer{w1, w2} {
		if _, err := Cosign(ctx, f.reader(t, f.dir), w, filepath.Join(t.TempDir(), "state")); err != nil {
			t.Fatal(err)
		}
	}
	f.appendHeads(t, f.dir, 3, 5) // the newest checkpoint has no cosignature
	l, err := Open(ctx, f.dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	var idx uint64
	var entry []byte
	for e, err := range l.Entries(ctx, 1, 2, 5) {
		if err != nil {
			t.Fatal(err)
		}
		entry, idx = e, 1
	}
	r, err := Prove(ctx, l, idx, entry)
	if err != nil {
		t.Fatal(err)
	}
	ws := []note.Verifier{w1.Verifier(), w2.Verifier()}
	a, err := VerifyReceipt(r, entry, f.verifier, ws, 2)
	if err != nil || a.Checkpoint.Size != 3 {
		t.Fatalf("receipt with two cosignatures: %+v %v", a, err)
	}
	// An entry the cosigned checkpoint does not hold is proven against the
	// newest one.
	for e, err := range l.Entries(ctx, 4, 5, 5) {
		if err != nil {
			t.Fatal(err)
		}
		entry = e
	}
	if r, err = Prove(ctx, l, 4, entry); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyReceipt(r, entry, f.verifier, ws, 1); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("entry 4 in a cosigned checkpoint: %v", err)
	}
}
