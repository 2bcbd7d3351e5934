package attest

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// proofSetup signs a statement of session with reasons and entries, and
// its head, and returns the verified statement and the head.
func proofSetup(t testing.TB, s *Signer, session string, reasons []Reason, entries []Entry, excluded []Excluded) (*Statement, []byte) {
	t.Helper()
	launchEnv, err := SignLaunch(s, sampleLaunch(session))
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launchEnv, session)
	st.Incomplete, st.Entries, st.Excluded = reasons, entries, excluded
	return signWithHead(t, s, launchEnv, st)
}

// signWithHead signs st and its head, and returns the statement as it
// verifies and the head.
func signWithHead(t testing.TB, s *Signer, launchEnv []byte, st *Statement) (*Statement, []byte) {
	t.Helper()
	env, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	v, err := VerifyStatement(env, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	head, err := SignHead(s, HeadOf(v))
	if err != nil {
		t.Fatal(err)
	}
	return v, head
}

func prove(t testing.TB, st *Statement, head []byte, p Path, applied bool) []byte {
	t.Helper()
	b, err := Prove(st, head, p, applied)
	if err != nil {
		t.Fatalf("Prove(%q): %v", p, err)
	}
	return b
}

// truth checks that what a verified bundle shows is true of st.
func truth(t testing.TB, st *Statement, p *Proven) {
	t.Helper()
	es := st.Entries
	if p.Applied {
		es = st.AppliedEntries()
	}
	i := slices.IndexFunc(es, func(e Entry) bool { return e.Path == p.Path })
	switch p.Kind {
	case Inclusion:
		if i < 0 || !reflect.DeepEqual(&es[i], p.Entry) {
			t.Fatalf("bundle proves %q changed as %+v; the statement says otherwise", p.Path, p.Entry)
		}
	case Absence:
		if i >= 0 {
			t.Fatalf("bundle proves %q unchanged; the statement lists it", p.Path)
		}
	case Subtree:
		var want []Entry
		for _, e := range es {
			if p.Path == Root || Within(e.Path, p.Path) {
				want = append(want, e)
			}
		}
		if !reflect.DeepEqual(want, p.Changed) && len(want)+len(p.Changed) > 0 {
			t.Fatalf("bundle proves the changes at or under %q are %v; the statement says %v", p.Path, p.Changed, want)
		}
		if (i >= 0) != (p.Entry != nil) || i >= 0 && !reflect.DeepEqual(&es[i], p.Entry) {
			t.Fatalf("subtree bundle of %q: entry %+v", p.Path, p.Entry)
		}
	default:
		t.Fatalf("proven kind %q", p.Kind)
	}
}

func TestProveEveryPath(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	paths := []Path{"-first", "b", "bin/x", "c", "new", "src/main.go/x", "zzz", "\xff", "src/main.h"}
	for _, e := range st.Entries {
		paths = append(paths, e.Path)
	}
	for _, applied := range []bool{false, true} {
		for _, p := range paths {
			b := prove(t, st, head, p, applied)
			got, err := VerifyBundle(b, s.Public())
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			truth(t, st, got)
			if len(b) > 4096+headSigOverhead(testAlg) {
				t.Errorf("bundle of %q is %d bytes", p, len(b))
			}
			if !got.Holds() || got.Head.SessionID != session1 || got.Applied != applied {
				t.Fatalf("%q: proven %+v", p, got)
			}
			if slices.ContainsFunc(st.Entries, func(e Entry) bool { return e.Path == p }) != (got.Kind == Inclusion) {
				t.Fatalf("%q: kind %s", p, got.Kind)
			}
		}
	}
	// An empty change set: every absence holds with no neighbour.
	st0, head0 := proofSetup(t, s, session1, nil, nil, nil)
	got, err := VerifyBundle(prove(t, st0, head0, "a", false), s.Public())
	if err != nil || got.Kind != Absence || len(got.Neighbours) != 0 {
		t.Fatalf("empty change set: %+v, %v", got, err)
	}
}

// TestProveCovered: a proof that holds for a head incomplete in a way that
// covers the path, or for a path in an excluded subtree, is ErrIncomplete
// with what covers it; elsewhere it holds.
func TestProveCovered(t *testing.T) {
	s := testSigner(t, 1)
	for _, c := range []struct {
		name     string
		reasons  []Reason
		excluded []Excluded
		covered  []Path
		clear    []Path
	}{
		{"reason on a path", []Reason{{Code: Unreadable, Path: "src/lib", Detail: "EACCES"}},
			nil, []Path{"src/lib", "src", "src/lib/a.go", "."}, []Path{"src/lib2", "bin", "src/main.go"}},
		{"reason at the root", []Reason{{Code: Unreadable, Path: ".", Detail: "x"}}, nil, []Path{"a", "src/main.go"}, nil},
		{"whole walk", []Reason{{Code: NoMountID, Detail: "old kernel"}}, nil, []Path{"a", "src/main.go"}, nil},
		{"budget with a path", []Reason{{Code: EntryBudget, Path: "zzz", Detail: "stopped"}}, nil, []Path{"a", "bin"}, nil},
		{"conflict elsewhere", []Reason{{Code: Conflict, Path: "old", Detail: "edited"}}, nil, []Path{"old"}, []Path{"bin", "older"}},
		{"excluded", nil, []Excluded{{Path: "node_modules", Entries: 3, Bytes: 9}}, []Path{"node_modules/x", "node_modules"}, []Path{"node_modulesx", "bin"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, head := proofSetup(t, s, session1, c.reasons, sampleEntries(), c.excluded)
			for _, p := range c.covered {
				for _, b := range [][]byte{prove(t, st, head, p, false), proveSubtree(t, st, head, p, false)} {
					got, err := VerifyBundle(b, s.Public())
					if !errors.Is(err, ErrIncomplete) || got == nil || got.Holds() {
						t.Fatalf("%q: %+v, %v; want it covered", p, got, err)
					}
					truth(t, st, got)
				}
			}
			for _, p := range c.clear {
				for _, b := range [][]byte{prove(t, st, head, p, false), proveSubtree(t, st, head, p, false)} {
					got, err := VerifyBundle(b, s.Public())
					if err != nil || !got.Holds() {
						t.Fatalf("%q: %+v, %v; want it to hold", p, got, err)
					}
				}
			}
		})
	}
}

// editBundle decodes a bundle, lets f change it, and encodes it again.
func editBundle(t *testing.T, b []byte, f func(*Bundle)) []byte {
	t.Helper()
	bd, err := ParseBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	f(bd)
	out, err := bd.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBundleForgeries(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	// "b" sorts between "." (0) and "bin" (1); "dev/null2" is leaf 2.
	absent := prove(t, st, head, "b", false)
	included := prove(t, st, head, "bin", false)
	leaf2, _ := ParseBundle(prove(t, st, head, "dev/null2", false))
	st2, head2 := proofSetup(t, s, session2, nil, sampleEntries()[1:], nil)
	// A whole bundle of another session under the same key verifies, and
	// says whose it is: a caller holding one session checks the id.
	if got, err := VerifyBundle(prove(t, st2, head2, "bin", false), s.Public()); err != nil || got.Head.SessionID != session2 {
		t.Fatalf("another session's own bundle: %+v, %v", got, err)
	}
	// A checkpoint of the same changes: the same root and count.
	var log CheckpointLog
	launchEnv, _ := SignLaunch(s, sampleLaunch(session1))
	cp := sampleCheckpoint(launchEnv)
	cp.Incomplete = nil
	if _, err := log.Append(s, cp); err != nil {
		t.Fatal(err)
	}
	cpHead, err := SignHead(s, HeadOfCheckpoint(cp))
	if err != nil {
		t.Fatal(err)
	}
	other := testSigner(t, 2)
	otherSt, otherHead := proofSetup(t, other, session1, nil, sampleEntries(), nil)
	for _, c := range []struct {
		name      string
		b         []byte
		malformed bool
	}{
		{"non-adjacent neighbours", editBundle(t, absent, func(b *Bundle) { b.Leaves[1] = leaf2.Leaves[0] }), false},
		{"one neighbour only", editBundle(t, absent, func(b *Bundle) { b.Leaves = b.Leaves[:1] }), false},
		{"neighbours swapped", editBundle(t, absent, func(b *Bundle) { b.Leaves[0], b.Leaves[1] = b.Leaves[1], b.Leaves[0] }), true},
		{"wrong index", editBundle(t, included, func(b *Bundle) { b.Leaves[0].Index++ }), false},
		{"wrong size", editBundle(t, included, func(b *Bundle) { b.Size++ }), false},
		{"smaller size", editBundle(t, included, func(b *Bundle) { b.Size-- }), false},
		{"absence of a changed path", editBundle(t, absent, func(b *Bundle) { b.Path = "bin" }), false},
		{"inclusion of another path", editBundle(t, included, func(b *Bundle) { b.Path = "bin2" }), false},
		{"inclusion as absence", editBundle(t, included, func(b *Bundle) { b.Kind = Absence }), false},
		{"absence as inclusion", editBundle(t, absent, func(b *Bundle) { b.Kind = Inclusion }), true},
		{"entry changed", editBundle(t, included, func(b *Bundle) { b.Leaves[0].Entry.New.Mode ^= 1 }), false},
		{"audit path cut", editBundle(t, included, func(b *Bundle) { b.Leaves[0].Inclusion = b.Leaves[0].Inclusion[1:] }), false},
		{"head of another session", editBundle(t, included, func(b *Bundle) { b.Head = head2 }), false},
		{"head of another key", editBundle(t, included, func(b *Bundle) { b.Head = otherHead }), false},
		{"checkpoint head as a statement head", editBundle(t, included, func(b *Bundle) { b.Head = cpHead }), true},
		{"head cut", editBundle(t, included, func(b *Bundle) { b.Head = b.Head[:len(b.Head)-2] }), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := VerifyBundle(c.b, s.Public())
			if c.malformed && !errors.Is(err, ErrMalformed) || !c.malformed && err != ErrNotVerified {
				t.Fatalf("got %+v, %v; want malformed %t", got, err, c.malformed)
			}
		})
	}
	// A bundle of another key's statement verifies under that key only.
	ob := prove(t, otherSt, otherHead, "bin", false)
	if _, err := VerifyBundle(ob, s.Public()); err != ErrNotVerified {
		t.Fatalf("another key's bundle: %v", err)
	}
	if _, err := VerifyBundle(ob, other.Public()); err != nil {
		t.Fatalf("another key's bundle under its key: %v", err)
	}
	// Prove refuses a head that is not the statement's.
	if _, err := Prove(st, head2, "bin", false); err == nil {
		t.Fatal("Prove with another statement's head")
	}
	if _, err := Prove(st, cpHead, "bin", false); err == nil {
		t.Fatal("Prove with a checkpoint's head")
	}
}

func TestBundleStrict(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	b := string(prove(t, st, head, "bin", false))
	for _, c := range []struct{ name, old, new string }{
		{"unknown member", `"kind":`, `"x":1,"kind":`},
		{"duplicate member", `"kind":"inclusion"`, `"kind":"inclusion","kind":"inclusion"`},
		{"case variant", `"kind":`, `"Kind":`},
		{"wrong format tag", BundleFormat, "https://layerseal.dev/proof/v1"},
		{"trailing data", "}\n", "}\n{}\n"},
		{"no newline", "}\n", "}"},
		{"unknown kind", `"kind":"inclusion"`, `"kind":"superset"`},
		{"size as number", `"size":"8"`, `"size":8`},
		{"inclusion not whole hashes", `"inclusion":"`, `"inclusion":"AAAA`},
		{"inclusion not base64", `"inclusion":"`, `"inclusion":"*`},
		{"invalid path", `"path":"bin"`, `"path":"bin/../x"`},
		{"invalid entry", `"change":"typechange"`, `"change":"modified"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(b, c.old) {
				t.Fatalf("bundle lacks %q", c.old)
			}
			_, err := VerifyBundle([]byte(strings.Replace(b, c.old, c.new, 1)), s.Public())
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

// TestBundleTamperEveryByte flips bits of every byte of an inclusion and
// an absence bundle: each result is refused, or proves something true of
// the statement (a flipped letter of the path can make an absence proof
// of another absent path).
func TestBundleTamperEveryByte(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	accepted, tried := 0, 0
	for _, p := range []Path{"bin", "b"} {
		b := prove(t, st, head, p, false)
		for _, i := range tamperPositions(b) {
			for _, bit := range []byte{0x01, 0x20, 0x80} {
				m := bytes.Clone(b)
				m[i] ^= bit
				tried++
				got, err := VerifyBundle(m, s.Public())
				if err != nil {
					if !rejected(err) {
						t.Fatalf("byte %d ^ %#x: error of neither class: %v", i, bit, err)
					}
					continue
				}
				accepted++
				truth(t, st, got)
			}
		}
	}
	t.Logf("%d mutations, %d accepted, each a true proof", tried, accepted)
}

// The JSON of a bundle reads back as a Bundle (a check of Marshal's
// members against the documented ones).
func TestBundleMembers(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	var m map[string]any
	if err := json.Unmarshal(prove(t, st, head, "b", false), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"applied", "format", "head", "kind", "leaves", "path", "size"}; !slices.Equal(keys, want) {
		t.Fatalf("members %v, want %v", keys, want)
	}
}

// TestProveApplied: with violations the applied change set differs from
// the observed one, and a bundle proves of the one it names.
func TestProveApplied(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	st := sampleStatement(launchEnv, session1)
	st.Incomplete = nil
	st.Violations = []Violation{{Path: "old", Rule: "old", Action: Reverted}}
	for _, e := range st.Entries {
		if e.Path != "old" {
			st.Applied = append(st.Applied, e)
		}
	}
	v, head := signWithHead(t, s, launchEnv, st)
	observed, err := VerifyBundle(prove(t, v, head, "old", false), s.Public())
	if err != nil || observed.Kind != Inclusion {
		t.Fatalf("observed: %+v, %v", observed, err)
	}
	b := prove(t, v, head, "old", true)
	applied, err := VerifyBundle(b, s.Public())
	if err != nil || applied.Kind != Absence || !applied.Applied {
		t.Fatalf("applied: %+v, %v", applied, err)
	}
	truth(t, v, applied)
	// The applied absence read as of the observed change set fails.
	if _, err := VerifyBundle(editBundle(t, b, func(b *Bundle) { b.Applied, b.Size = false, v.Count }), s.Public()); err != ErrNotVerified {
		t.Fatalf("applied bundle as observed: %v", err)
	}
}

func proveSubtree(t testing.TB, st *Statement, head []byte, p Path, applied bool) []byte {
	t.Helper()
	pr, err := NewProver(st, head)
	if err != nil {
		t.Fatal(err)
	}
	b, err := pr.ProveSubtree(p, applied)
	if err != nil {
		t.Fatalf("ProveSubtree(%q): %v", p, err)
	}
	return b
}

// TestProveSubtree: a subtree bundle of every path shows exactly the
// changes at or under it, whatever sorts between the path and its
// children ("src" < "src-x" < "src/...", "src.go" after "src/").
func TestProveSubtree(t *testing.T) {
	s := testSigner(t, 1)
	es := sampleEntries()
	extra := func(p Path) Entry { return Entry{Path: p, Change: Added, New: &State{Type: FIFO, Mode: 0o600}} }
	es = append(es, extra("src-x"), extra("src.go"), extra("src0"), extra("zz/a"), extra("zz/b"))
	slices.SortFunc(es, func(a, b Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	st, head := proofSetup(t, s, session1, nil, es, nil)
	st0, head0 := proofSetup(t, s, session1, nil, nil, nil)
	paths := []Path{".", "src", "sr", "src/main.go", "src/main", "zz", "zz/a", "dev", "b", "a", "zzz", "\xff", "new\nline\xff%", "ünïcode"}
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	for _, p := range paths {
		for _, c := range []struct {
			st   *Statement
			head []byte
		}{{st, head}, {st0, head0}} {
			b := proveSubtree(t, c.st, c.head, p, false)
			got, err := VerifyBundle(b, s.Public())
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			if got.Kind != Subtree {
				t.Fatalf("%q: kind %s", p, got.Kind)
			}
			truth(t, c.st, got)
		}
	}
	got, err := VerifyBundle(proveSubtree(t, st, head, "src", false), s.Public())
	if err != nil || len(got.Changed) != 2 || got.Changed[0].Path != "src" || got.Changed[1].Path != "src/main.go" {
		t.Fatalf("src: %+v, %v", got, err)
	}
}

// TestSubtreeForgeries: leaving a change out of a subtree bundle, or a
// neighbour, or showing a leaf that proves nothing, is refused.
func TestSubtreeForgeries(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	// Leaves: 0 ".", 1 "bin", 2 "dev/null2", 3 "new\nline\xff%", 4 "old",
	// 5 "src", 6 "src/main.go", 7 "ünïcode/ファイル".
	sub := proveSubtree(t, st, head, "src", false)
	dev := proveSubtree(t, st, head, "dev", false) // "dev/null2" under it
	other := prove(t, st, head, "bin", false)
	otherLeaf, _ := ParseBundle(other)
	for _, c := range []struct {
		name      string
		b         []byte
		malformed bool
	}{
		{"a change left out", editBundle(t, sub, func(b *Bundle) {
			b.Leaves = slices.DeleteFunc(b.Leaves, func(l ProofLeaf) bool { return l.Entry.Path == "src/main.go" })
		}), false},
		{"the path's own change left out", editBundle(t, sub, func(b *Bundle) {
			b.Leaves = slices.DeleteFunc(b.Leaves, func(l ProofLeaf) bool { return l.Entry.Path == "src" })
		}), false},
		{"the neighbour after left out", editBundle(t, sub, func(b *Bundle) { b.Leaves = b.Leaves[:len(b.Leaves)-1] }), false},
		{"the neighbour before left out", editBundle(t, dev, func(b *Bundle) { b.Leaves = b.Leaves[1:] }), false},
		{"a leaf that proves nothing", editBundle(t, dev, func(b *Bundle) {
			b.Leaves = append([]ProofLeaf{otherLeaf.Leaves[0]}, b.Leaves...)
		}), true},
		{"subtree read as another path", editBundle(t, dev, func(b *Bundle) { b.Path = "src" }), false},
		{"a subtree with changes as absence", editBundle(t, sub, func(b *Bundle) { b.Kind = Absence }), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := VerifyBundle(c.b, s.Public())
			if c.malformed && !errors.Is(err, ErrMalformed) || !c.malformed && err != ErrNotVerified {
				t.Fatalf("got %+v, %v; want malformed %t", got, err, c.malformed)
			}
		})
	}
}

// TestBundleSession: VerifyBundleWith refuses a bundle of another session
// than the one named, or not bound to the launch record given.
func TestBundleSession(t *testing.T) {
	s := testSigner(t, 1)
	st, head := proofSetup(t, s, session1, nil, sampleEntries(), nil)
	b := prove(t, st, head, "bin", false)
	launch1, _ := SignLaunch(s, sampleLaunch(session1))
	launch2, _ := SignLaunch(s, sampleLaunch(session2))
	for _, o := range []ProofOptions{{}, {SessionID: session1}, {Launch: launch1}, {SessionID: session1, Launch: launch1}} {
		if _, err := VerifyBundleWith(b, s.Public(), o); err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
	}
	for _, o := range []ProofOptions{{SessionID: session2}, {Launch: launch2}, {SessionID: session1, Launch: launch2}} {
		if _, err := VerifyBundleWith(b, s.Public(), o); !errors.Is(err, ErrNotVerified) {
			t.Fatalf("%+v: %v; want not verified", o, err)
		}
	}
	// A launch record under another key is not the session's.
	other, _ := SignLaunch(testSigner(t, 2), sampleLaunch(session1))
	if _, err := VerifyBundleWith(b, s.Public(), ProofOptions{Launch: other}); !rejected(errors.Unwrap(err)) && !errors.Is(err, ErrNotVerified) {
		t.Fatalf("launch record of another key: %v", err)
	}
}
