package attest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// testDelta is what a checkpoint whose changes are all lists as its
// difference from a checkpoint whose changes are base.
func testDelta(base, all []Entry) ([]Entry, []Path) {
	var changed []Entry
	var removed []Path
	at := map[Path]Entry{}
	for _, e := range all {
		at[e.Path] = e
	}
	for _, e := range base {
		if n, ok := at[e.Path]; !ok {
			removed = append(removed, e.Path)
		} else if !bytes.Equal(n.MarshalLeaf(), e.MarshalLeaf()) {
			changed = append(changed, n)
		}
		delete(at, e.Path)
	}
	for _, e := range all {
		if _, ok := at[e.Path]; ok {
			changed = append(changed, e)
		}
	}
	slices.SortFunc(changed, func(a, b Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return changed, removed
}

// listDifference makes c list its changes, all, as the difference from
// those of checkpoint base, base.
func listDifference(t testing.TB, c *Checkpoint, seq uint64, base, all []Entry) {
	t.Helper()
	root, err := MerkleRoot(all)
	if err != nil {
		t.Fatal(err)
	}
	c.Base, c.Root, c.Count = seq, root, uint64(len(all))
	c.Entries, c.Removed = testDelta(base, all)
}

// sampleListAt is the change list of walked checkpoint i of sampleChain:
// a growing list, with an entry modified from checkpoint 7 on and one
// removed from checkpoint 8 on.
func sampleListAt(i int) []Entry {
	all := sampleEntries()[:min(i, 8)]
	if i >= 7 {
		all[6].New = &State{Type: File, Mode: 0o600, Size: 4, SHA256: digest("seven")}
	}
	if i >= 8 {
		all = slices.Delete(all, 1, 2)
	}
	return all
}

// sampleChain signs n checkpoints of session: every third one unchanged
// since the one before it; the others list the growing change set of
// sampleListAt, in full up to checkpoint 2 and as a difference after.
func sampleChain(t testing.TB, s *Signer, n int, session string) (launchEnv []byte, envs [][]byte, log *CheckpointLog) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session))
	if err != nil {
		t.Fatal(err)
	}
	log = &CheckpointLog{}
	last := uint64(0)
	for i := 1; i <= n; i++ {
		c := &Checkpoint{
			SessionID: session, Launch: sha(launchEnv), Workspace: "/home/dev/proj\xff",
			Taken: time.Date(2025, 11, 30, 10, i, 0, 0, time.UTC), Probe: digest(string(rune('a' + i))), ProbeEntries: uint64(10 + i),
		}
		if i%3 == 0 {
			c.Unchanged, c.SameAs = true, last
		} else {
			if i <= 2 {
				c.Entries = sampleListAt(i)
			} else {
				listDifference(t, c, last, sampleListAt(int(last)), sampleListAt(i))
			}
			if i == 5 {
				c.Incomplete = []Reason{{Code: Unstable, Path: "src/main.go", Detail: "changed while hashed"}}
			}
		}
		env, err := log.Append(s, c)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		if !c.Unchanged {
			last = c.Seq
		}
		envs = append(envs, env)
	}
	return launchEnv, envs, log
}

func TestCheckpointChainVerifies(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, log := sampleChain(t, s, 8, session1)
	cps, all, err := VerifyChain(envs, s.Public(), launch)
	if err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	if !reflect.DeepEqual(all, sampleListAt(8)) {
		t.Errorf("the chain resolves to\n%+v\nwant\n%+v", all, sampleListAt(8))
	}
	if cps[7].Base != 7 || len(cps[7].Entries) != 1 || !slices.Equal(cps[7].Removed, []Path{"bin"}) || cps[7].Count != 7 {
		t.Errorf("checkpoint 8 lists %d entries and removes %q (base %d, count %d); want 1 entry, bin removed, base 7, count 7",
			len(cps[7].Entries), cps[7].Removed, cps[7].Base, cps[7].Count)
	}
	// Each prefix of the chain resolves to its last walked list.
	for n, walked := range map[int]int{1: 1, 2: 2, 3: 2, 4: 4, 6: 5, 7: 7} {
		got, err := ChangesOf(cps[:n])
		if err != nil || !reflect.DeepEqual(got, sampleListAt(walked)) {
			t.Errorf("changes of checkpoint %d: %v, %+v; want those of %d", n, err, got, walked)
		}
	}
	if len(cps) != 8 || !cps[2].Unchanged || cps[2].SameAs != 2 || !bytes.Equal(cps[2].Root, cps[1].Root) {
		t.Fatalf("unexpected chain: %+v", cps[2])
	}
	if !cps[3].Complete || cps[4].Complete || !cps[5].Unchanged || cps[5].Complete || len(cps[5].Incomplete) != 1 {
		t.Errorf("completeness not carried: 4:%t 5:%t 6:%t", cps[3].Complete, cps[4].Complete, cps[5].Complete)
	}
	// Any two heads have a consistency proof.
	leaves := log.Leaves()
	for m := 1; m <= 8; m++ {
		for n := m; n <= 8; n++ {
			p, err := ConsistencyProof(leaves, uint64(m), uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			if err := VerifyConsistency(uint64(m), uint64(n), p, cps[m-1].Log.Root, cps[n-1].Log.Root); err != nil {
				t.Errorf("consistency %d→%d: %v", m, n, err)
			}
			if m < n {
				if err := VerifyConsistency(uint64(m), uint64(n), p, cps[n-1].Log.Root, cps[n-1].Log.Root); err == nil {
					t.Errorf("consistency %d→%d verified against the wrong old root", m, n)
				}
			}
		}
	}
	// Each file verifies on its own too.
	for i, env := range envs {
		if _, err := VerifyCheckpoint(env, s.Public()); err != nil {
			t.Errorf("checkpoint %d alone: %v", i+1, err)
		}
	}
}

func TestCheckpointChainTampering(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, _ := sampleChain(t, s, 6, session1)
	without := func(i int) [][]byte { return append(append([][]byte{}, envs[:i]...), envs[i+1:]...) }
	swapped := append([][]byte{}, envs...)
	swapped[1], swapped[2] = swapped[2], swapped[1]

	// A chain rewritten from checkpoint 2 on, signed with the same key:
	// its heads are consistent with each other, but not with checkpoint 1.
	_, other, _ := sampleChain(t, s, 6, session2)
	_, rewritten, _ := func() ([]byte, [][]byte, *CheckpointLog) {
		log := &CheckpointLog{}
		var out [][]byte
		c1, _ := ReadCheckpoint(envs[0])
		c1.Entries = c1.Entries[:0]
		c1.Unchanged, c1.SameAs = false, 0
		env, err := log.Append(s, c1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
		return nil, out, log
	}()
	mixed := append([][]byte{envs[0]}, append([][]byte{rewritten[0]}, envs[2:]...)...)
	otherKey := testSigner(t, 2)
	_, foreign, _ := sampleChain(t, otherKey, 6, session1)

	launch2, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		envs  [][]byte
		chain bool // ErrChain rather than ErrNotVerified
	}{
		{"first dropped", without(0), true},
		{"middle dropped", without(2), true},
		{"reordered", swapped, true},
		{"repeated", append(append([][]byte{}, envs[:3]...), envs[2:]...), true},
		{"rewritten checkpoint", mixed, true},
		{"another key", append(append([][]byte{}, envs[:2]...), foreign[2:]...), false},
		{"another session's checkpoint", append(append([][]byte{}, envs[:2]...), other[2]), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := VerifyChain(c.envs, s.Public(), launch)
			if err == nil {
				t.Fatal("verified")
			}
			if c.chain && !errors.Is(err, ErrChain) && !errors.Is(err, ErrNotVerified) {
				t.Errorf("error %v is neither ErrChain nor ErrNotVerified", err)
			}
			if !c.chain && !errors.Is(err, ErrNotVerified) {
				t.Errorf("error %v is not ErrNotVerified", err)
			}
		})
	}
	if _, _, err := VerifyChain(envs, s.Public(), launch2); !errors.Is(err, ErrNotVerified) {
		t.Errorf("chain verified against another launch record: %v", err)
	}
	if _, err := VerifyCheckpoint(envs[0], otherKey.Public()); !errors.Is(err, ErrNotVerified) {
		t.Errorf("checkpoint verified with another key: %v", err)
	}
	// Every byte of the payload matters: flipping one is refused.
	for _, i := range []int{40, 200, len(envs[3]) / 2, len(envs[3]) - 120} {
		bad := append([]byte{}, envs[3]...)
		bad[i] ^= 1
		if _, err := VerifyCheckpoint(bad, s.Public()); err == nil {
			t.Errorf("byte %d flipped: verified", i)
		}
	}
}

func TestCheckpointStatementHead(t *testing.T) {
	s := testSigner(t, 1)
	launch, envs, _ := sampleChain(t, s, 3, session1)
	last, err := VerifyCheckpoint(envs[2], s.Public())
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launch, session1)
	st.CheckpointHead = sha(envs[2])
	if err := CheckStatementHead(st, envs[2], last); err != nil {
		t.Errorf("bound statement: %v", err)
	}
	if err := CheckStatementHead(st, envs[1], last); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement bound to checkpoint 3 accepted with checkpoint 2 last: %v", err)
	}
	if err := CheckStatementHead(st, nil, nil); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement with a head accepted without checkpoints: %v", err)
	}
	st.CheckpointHead = nil
	if err := CheckStatementHead(st, envs[2], last); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement without a head accepted with checkpoints: %v", err)
	}
}

func TestCheckpointStrictDecoding(t *testing.T) {
	s := testSigner(t, 1)
	_, envs, _ := sampleChain(t, s, 2, session1)
	c, err := ReadCheckpoint(envs[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCheckpoint(append(bytes.TrimSuffix(envs[1], []byte("\n")), []byte(" \n")...)); !errors.Is(err, ErrMalformed) {
		t.Errorf("trailing space: %v", err)
	}
	// A statement is not a checkpoint.
	_, stEnv := signedPair(t, s)
	if _, err := VerifyCheckpoint(stEnv, s.Public()); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "unsupported format") {
		t.Errorf("statement read as checkpoint: %v", err)
	}
	if c.Seq != 2 || c.Log.Size != 2 {
		t.Errorf("seq %d, log size %d", c.Seq, c.Log.Size)
	}
}

// randomEntries returns n valid entries with paths of random bytes (any
// byte but NUL and '/' in a component: invalid UTF-8, newlines, quotes,
// '%', control bytes), sorted and unique, with random states.
func randomEntries(rng *rand.Rand, n int) []Entry {
	seen := map[Path]bool{}
	var out []Entry
	for len(out) < n {
		var b []byte
		for c := range 1 + rng.IntN(3) {
			if c > 0 {
				b = append(b, '/')
			}
			for range 1 + rng.IntN(6) {
				x := byte(1 + rng.IntN(255))
				if x == '/' || x == '.' {
					x = '"'
				}
				b = append(b, x)
			}
		}
		p := Path(b)
		if seen[p] {
			continue
		}
		seen[p] = true
		st := func() *State {
			switch rng.IntN(4) {
			case 0:
				s := &State{Type: File, Mode: uint32(rng.IntN(0o10000)), UID: rng.Uint32(), GID: rng.Uint32(),
					Size: rng.Uint64(), MtimeNS: rng.Int64() - rng.Int64(), SHA256: digest(string(b))}
				if rng.IntN(2) == 0 {
					s.Xattrs = []Xattr{{Name: "user.\n", Value: []byte{0, '"', 0xff}}, {Name: "user.\xff"}}
				}
				return s
			case 1:
				return &State{Type: Symlink, Mode: 0o777, Size: 3, Target: Path("\\\"\xfe\n" + string(b))}
			case 2:
				return &State{Type: BlockDev, Mode: 0o600, Rdev: rng.Uint64() | 1}
			}
			return &State{Type: Dir, Mode: 0o755, MtimeNS: -1}
		}
		e := Entry{Path: p}
		switch rng.IntN(3) {
		case 0:
			e.Change, e.New = Added, st()
		case 1:
			e.Change, e.Old = Deleted, st()
		default:
			e.Old, e.New = st(), st()
			e.Change = Modified
			if e.Old.Type != e.New.Type {
				e.Change = TypeChange
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return out
}

// Append does not parse what it signs: its encoding must be canonical by
// construction. Every checkpoint it writes, over values with every kind
// of awkward byte, must verify strictly (one spelling of envelope and
// payload) and read back as exactly what was signed, and its bytes must
// be those of the generic canonical encoder.
func TestCheckpointAppendRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	launch, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	log := &CheckpointLog{}
	var envs [][]byte
	var prev []Entry // the last walked checkpoint's changes
	for i := 1; i <= 12; i++ {
		c := &Checkpoint{
			SessionID: session1, Launch: sha(launch), Workspace: "/w\xff\n\"%",
			Taken: time.Date(2025, 11, 30, 10, 0, i, i*1001, time.UTC), Probe: digest(fmt.Sprint(i)), ProbeEntries: rng.Uint64(),
			Stats: Stats{UpperEntries: rng.Uint64(), LowerEntries: rng.Uint64(), BytesHashed: 1<<64 - 1},
		}
		if i%4 == 0 {
			c.Unchanged, c.SameAs = true, log.last.Seq
		} else {
			c.Entries = randomEntries(rng, 1+rng.IntN(200))
			if i%3 == 0 {
				c.Entries = append(sampleEntries(), Entry{Path: "\xff\xff", Change: Added, New: &State{Type: Socket}})
			}
			if i%4 == 2 {
				// Half the last list kept, the rest new.
				all := append(slices.Clone(prev[:len(prev)/2]), c.Entries...)
				slices.SortFunc(all, func(a, b Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
				all = slices.CompactFunc(all, func(a, b Entry) bool { return a.Path == b.Path })
				listDifference(t, c, log.last.Seq, prev, all)
				prev = all
			} else {
				prev = c.Entries
			}
			if i%2 == 1 {
				c.Incomplete = []Reason{{Code: Unstable, Path: c.Entries[0].Path, Detail: "\xff\"\\\n\t%00 ü"}, {Code: TimeBudget, Detail: "x"}}
			}
		}
		env, err := log.Append(s, c)
		if err != nil {
			t.Fatalf("checkpoint %d: %v", i, err)
		}
		got, err := VerifyCheckpoint(env, s.Public())
		if err != nil {
			t.Fatalf("checkpoint %d does not verify: %v", i, err)
		}
		if !reflect.DeepEqual(got.toJSON(), c.toJSON()) {
			t.Errorf("checkpoint %d reads back as\n%+v\nwant\n%+v", i, got.toJSON(), c.toJSON())
		}
		payload, err := canonicalJSON(&intoto[*checkpointJSON]{Type: StatementType,
			Subject:       []subject{{Name: StatementSubject, Digest: digestSet{SHA256: hex.EncodeToString(c.Root)}}},
			PredicateType: CheckpointPredicateType, Predicate: c.toJSON()})
		if err != nil {
			t.Fatal(err)
		}
		e, err := parseEnvelope(env, MaxCheckpointSize)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(e.Payload, payload) {
			t.Errorf("checkpoint %d: payload is not the canonical encoder's", i)
		}
		want, err := canonicalJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(env, append(want, '\n')) {
			t.Errorf("checkpoint %d: envelope is not the canonical encoder's:\n%s\nwant\n%s", i, env, want)
		}
		envs = append(envs, env)
	}
	if _, _, err := VerifyChain(envs, s.Public(), launch); err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
}

// A value without one spelling is refused before it is signed.
func TestCheckpointAppendRefusesNoSpelling(t *testing.T) {
	s := testSigner(t, 1)
	for name, mut := range map[string]func(*Checkpoint){
		"NUL in path":      func(c *Checkpoint) { c.Entries[0].Path = "a\x00b" },
		"NUL in detail":    func(c *Checkpoint) { c.Incomplete = []Reason{{Code: Unstable, Detail: "a\x00"}} },
		"NUL in workspace": func(c *Checkpoint) { c.Workspace = "/w\x00" },
		"unknown code":     func(c *Checkpoint) { c.Incomplete = []Reason{{Code: "nope"}} },
		"time zone":        func(c *Checkpoint) { c.Taken = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) },
	} {
		c := &Checkpoint{SessionID: session1, Launch: digest("l"), Workspace: "/w", Taken: time.Unix(1, 0).UTC(),
			Probe: digest("p"), Entries: sampleEntries()}
		mut(c)
		if env, err := (&CheckpointLog{}).Append(s, c); err == nil {
			t.Errorf("%s: signed %s", name, env)
		}
	}
}

// A checkpoint that lists a difference is checked through the chain: a
// difference that does not give its root, or that names another base
// than the last checkpoint that walked, is refused, even signed with the
// session's key.
func TestCheckpointDifferenceRefused(t *testing.T) {
	s := testSigner(t, 1)
	launch, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	chain := func(mut func(log *CheckpointLog, c *Checkpoint)) [][]byte {
		log := &CheckpointLog{}
		var envs [][]byte
		for i := 1; i <= 3; i++ {
			c := &Checkpoint{SessionID: session1, Launch: sha(launch), Workspace: "/w", Taken: time.Unix(int64(i), 0).UTC(),
				Probe: digest("p"), Entries: sampleListAt(i + 4)}
			if i == 3 {
				listDifference(t, c, 2, sampleListAt(6), sampleListAt(7))
				mut(log, c)
			}
			env, err := log.Append(s, c)
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
		return envs
	}
	good := chain(func(*CheckpointLog, *Checkpoint) {})
	if _, all, err := VerifyChain(good, s.Public(), launch); err != nil || !reflect.DeepEqual(all, sampleListAt(7)) {
		t.Fatalf("good chain: %v", err)
	}
	for name, c := range map[string]struct {
		mut   func(*CheckpointLog, *Checkpoint)
		chain bool
	}{
		"entry dropped from the difference": {func(_ *CheckpointLog, c *Checkpoint) { c.Entries = c.Entries[1:] }, false},
		"removed path added":                {func(_ *CheckpointLog, c *Checkpoint) { c.Removed = []Path{"bin"} }, false},
		"count off by one":                  {func(_ *CheckpointLog, c *Checkpoint) { c.Count++ }, false},
		"root of another list":              {func(_ *CheckpointLog, c *Checkpoint) { c.Root = digest("x") }, false},
		"an older base": {func(log *CheckpointLog, c *Checkpoint) {
			c.Base, log.last = 1, &Checkpoint{Seq: 1}
		}, true},
	} {
		t.Run(name, func(t *testing.T) {
			envs := chain(c.mut)
			if _, err := VerifyCheckpoint(envs[2], s.Public()); err != nil {
				t.Fatalf("the checkpoint alone should verify (its list is checked through the chain): %v", err)
			}
			_, _, err := VerifyChain(envs, s.Public(), launch)
			want := ErrNotVerified
			if c.chain {
				want = ErrChain
			}
			if !errors.Is(err, want) {
				t.Errorf("VerifyChain: %v, want %v", err, want)
			}
		})
	}
}

// A root the caller gives for a checkpoint that lists all its changes is
// signed as given, and refused on reading when it is not theirs.
func TestCheckpointCallerRootChecked(t *testing.T) {
	s := testSigner(t, 1)
	for _, root := range [][]byte{nil, digest("not the root")} {
		c := &Checkpoint{SessionID: session1, Launch: digest("l"), Workspace: "/w", Taken: time.Unix(1, 0).UTC(),
			Probe: digest("p"), Entries: sampleEntries(), Root: root}
		env, err := (&CheckpointLog{}).Append(s, c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyCheckpoint(env, s.Public()); (err == nil) != (root == nil) {
			t.Errorf("root %x given: verify %v", root, err)
		}
	}
}
