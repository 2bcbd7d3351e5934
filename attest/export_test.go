package attest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// sampleExport returns the export of a session of session id with n
// checkpoints (sampleChain) and a statement bound to the last, complete or
// not, with proofs of "bin" (changed), "b" (not) and the subtree "src".
func sampleExport(t testing.TB, s *Signer, session string, n int, complete bool) *Export {
	t.Helper()
	launch, envs, _ := sampleChain(t, s, n, session)
	x := &Export{Launch: launch}
	for _, env := range envs {
		cp, err := VerifyCheckpoint(env, s.Public())
		if err != nil {
			t.Fatal(err)
		}
		head, err := SignHead(s, HeadOfCheckpoint(cp))
		if err != nil {
			t.Fatal(err)
		}
		x.Checkpoints = append(x.Checkpoints, ExportCheckpoint{Checkpoint: env, Head: head})
	}
	st := sampleStatement(launch, session)
	if complete {
		st.Complete, st.Incomplete = true, nil
	}
	if n > 0 {
		st.CheckpointHead = sha(envs[n-1])
	}
	var err error
	if x.Statement, err = SignStatement(s, st); err != nil {
		t.Fatal(err)
	}
	v, err := VerifyStatement(x.Statement, s.Public(), launch)
	if err != nil {
		t.Fatal(err)
	}
	if x.Head, err = SignHead(s, HeadOf(v)); err != nil {
		t.Fatal(err)
	}
	pr, err := NewProver(v, x.Head)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Path{"bin", "b"} {
		b, err := pr.Prove(p, false)
		if err != nil {
			t.Fatal(err)
		}
		x.Proofs = append(x.Proofs, b)
	}
	b, err := pr.ProveSubtree("src", false)
	if err != nil {
		t.Fatal(err)
	}
	x.Proofs = append(x.Proofs, b)
	return x
}

func marshalExport(t testing.TB, x *Export) []byte {
	t.Helper()
	b, err := x.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExportVerifies(t *testing.T) {
	s := testSigner(t, 1)
	x := sampleExport(t, s, session1, 4, true)
	file := marshalExport(t, x)
	ev, err := VerifyExport(file, s.Public(), ProofOptions{SessionID: session1})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Launch.SessionID != session1 || len(ev.Chain) != 4 || len(ev.Heads) != 4 || len(ev.Proofs) != 3 || !ev.Complete() {
		t.Fatalf("evidence: %+v", ev)
	}
	if ev.Proofs[0].Kind != Inclusion || ev.Proofs[1].Kind != Absence || ev.Proofs[2].Kind != Subtree {
		t.Fatalf("proofs: %+v %+v %+v", ev.Proofs[0], ev.Proofs[1], ev.Proofs[2])
	}
	for _, p := range ev.Proofs {
		truth(t, ev.Statement, p)
	}
	// Parse and Marshal are inverses.
	back, err := ParseExport(file)
	if err != nil || !bytes.Equal(marshalExport(t, back), file) {
		t.Fatalf("round trip: %v", err)
	}
	// No checkpoints, no proofs.
	y := sampleExport(t, s, session1, 0, true)
	y.Proofs = nil
	if ev, err := VerifyExport(marshalExport(t, y), s.Public(), ProofOptions{}); err != nil || len(ev.Chain) != 0 {
		t.Fatalf("export without checkpoints or proofs: %+v, %v", ev, err)
	}
}

// TestExportIncomplete: an export holds with ErrIncomplete when its
// statement is incomplete and it carries no proof, or when a proof it
// carries is covered by a reason; proofs elsewhere hold.
func TestExportIncomplete(t *testing.T) {
	s := testSigner(t, 1)
	x := sampleExport(t, s, session1, 2, false) // digest-cap on src/main.go, agent-outlived
	ev, err := VerifyExport(marshalExport(t, x), s.Public(), ProofOptions{})
	if !errors.Is(err, ErrIncomplete) || ev == nil || ev.Complete() {
		t.Fatalf("incomplete statement: %+v, %v", ev, err)
	}
	x.Proofs = nil
	if _, err := VerifyExport(marshalExport(t, x), s.Public(), ProofOptions{}); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("incomplete statement without proofs: %v", err)
	}
	// A statement incomplete only at src/main.go: a proof of bin holds, one
	// of the subtree src does not.
	launch, _, _ := sampleChain(t, s, 0, session1)
	st := sampleStatement(launch, session1)
	st.Incomplete = st.Incomplete[:1]
	v, head := signWithHead(t, s, launch, st)
	env, _ := SignStatement(s, st)
	y := &Export{Launch: launch, Statement: env, Head: head, Proofs: [][]byte{prove(t, v, head, "bin", false)}}
	if _, err := VerifyExport(marshalExport(t, y), s.Public(), ProofOptions{}); err != nil {
		t.Fatalf("proof away from the reason: %v", err)
	}
	y.Proofs = append(y.Proofs, proveSubtree(t, v, head, "src", false))
	ev, err = VerifyExport(marshalExport(t, y), s.Public(), ProofOptions{})
	if !errors.Is(err, ErrIncomplete) || ev.Proofs[0].Holds() == false || ev.Proofs[1].Holds() {
		t.Fatalf("proof covered by the reason: %+v, %v", ev, err)
	}
}

// TestExportTamperFields replaces each field of an export with something
// else that is well formed (another session's, another checkpoint's, a
// file with one bit flipped): none verifies.
func TestExportTamperFields(t *testing.T) {
	s := testSigner(t, 1)
	x := sampleExport(t, s, session1, 4, true)
	o := sampleExport(t, s, session2, 4, true) // the same changes, another session
	ok := marshalExport(t, x)
	edit := func(f func(x *Export)) []byte {
		y, err := ParseExport(ok)
		if err != nil {
			t.Fatal(err)
		}
		f(y)
		return marshalExport(t, y)
	}
	flip := func(b []byte, at int) []byte {
		c := bytes.Clone(b)
		c[at%len(c)] ^= 1
		return c
	}
	cases := map[string][]byte{
		"launch of another session":          edit(func(y *Export) { y.Launch = o.Launch }),
		"statement of another session":       edit(func(y *Export) { y.Statement = o.Statement }),
		"head of another session":            edit(func(y *Export) { y.Head = o.Head }),
		"checkpoint head as statement head":  edit(func(y *Export) { y.Head = x.Checkpoints[3].Head }),
		"statement head as checkpoint head":  edit(func(y *Export) { y.Checkpoints[3].Head = x.Head }),
		"checkpoint of another session":      edit(func(y *Export) { y.Checkpoints[1] = o.Checkpoints[1] }),
		"checkpoint head of another session": edit(func(y *Export) { y.Checkpoints[1].Head = o.Checkpoints[1].Head }),
		"checkpoint heads swapped": edit(func(y *Export) {
			y.Checkpoints[0].Head, y.Checkpoints[1].Head = y.Checkpoints[1].Head, y.Checkpoints[0].Head
		}),
		"checkpoints swapped":       edit(func(y *Export) { y.Checkpoints[0], y.Checkpoints[1] = y.Checkpoints[1], y.Checkpoints[0] }),
		"last checkpoint dropped":   edit(func(y *Export) { y.Checkpoints = y.Checkpoints[:3] }),
		"first checkpoint dropped":  edit(func(y *Export) { y.Checkpoints = y.Checkpoints[1:] }),
		"checkpoints dropped":       edit(func(y *Export) { y.Checkpoints = nil }),
		"bundle of another session": edit(func(y *Export) { y.Proofs[0] = o.Proofs[0] }),
		"bundle against a checkpoint head": edit(func(y *Export) {
			y.Proofs[0] = bytes.Replace(y.Proofs[0], jsonB64(x.Head), jsonB64(x.Checkpoints[3].Head), 1)
		}),
		"wrong format tag":                    bytes.Replace(ok, []byte(ExportFormat), []byte("https://layerseal.dev/export/v2"), 1),
		"unknown member":                      bytes.Replace(ok, []byte(`"launch":`), []byte(`"x":1,"launch":`), 1),
		"case variant":                        bytes.Replace(ok, []byte(`"head":`), []byte(`"Head":`), 1),
		"duplicate member":                    bytes.Replace(ok, []byte(`"proofs":[`), []byte(`"proofs":[],"proofs":[`), 1),
		"trailing data":                       append(bytes.Clone(ok), "{}\n"...),
		"empty statement":                     edit(func(y *Export) { y.Statement = nil }),
		"checkpoint without its head":         edit(func(y *Export) { y.Checkpoints[2].Head = nil }),
		"launch of another key":               edit(func(y *Export) { y.Launch = sampleExport(t, testSigner(t, 2), session1, 0, true).Launch }),
		"whole export of another key":         marshalExport(t, sampleExport(t, testSigner(t, 2), session1, 4, true)),
		"statement not bound to checkpoint 4": edit(func(y *Export) { y.Checkpoints = y.Checkpoints[:3]; y.Statement = o.Statement }),
	}
	for i := 0; i < 400; i += 37 {
		cases["launch bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Launch = flip(y.Launch, i*7) })
		cases["statement bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Statement = flip(y.Statement, i*31) })
		cases["head bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Head = flip(y.Head, i*5) })
		cases["checkpoint bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Checkpoints[i%4].Checkpoint = flip(y.Checkpoints[i%4].Checkpoint, i*11) })
		cases["checkpoint head bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Checkpoints[i%4].Head = flip(y.Checkpoints[i%4].Head, i*5) })
		cases["proof bit "+string(rune('a'+i/37))] = edit(func(y *Export) { y.Proofs[i%3] = flip(y.Proofs[i%3], i*9) })
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			ev, err := VerifyExport(b, s.Public(), ProofOptions{})
			if err == nil || errors.Is(err, ErrIncomplete) {
				// A flipped bit in a proof's path can make a true proof of
				// another path: then it must be true.
				if name[:5] == "proof" && err == nil {
					for _, p := range ev.Proofs {
						truth(t, ev.Statement, p)
					}
					return
				}
				t.Fatalf("verified: %v", err)
			}
			if !rejected(err) && !errors.Is(err, ErrNotVerified) && !errors.Is(err, ErrChain) {
				t.Fatalf("error of no class: %v", err)
			}
		})
	}
	// The session named must be the export's.
	if _, err := VerifyExport(ok, s.Public(), ProofOptions{SessionID: session2}); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("export of another session than the one named: %v", err)
	}
}

// jsonB64 is b as its canonical JSON string spells it, without quotes.
func jsonB64(b []byte) []byte {
	j, err := canonicalJSON(b)
	if err != nil {
		panic(err)
	}
	return j[1 : len(j)-1]
}

// TestReadExport: the export of an output dir as a run leaves it holds
// its files byte for byte, and a missing checkpoint head is an error.
func TestReadExport(t *testing.T) {
	s := testSigner(t, 1)
	x := sampleExport(t, s, session1, 3, true)
	out := t.TempDir()
	write(t, filepath.Join(out, LaunchFile), x.Launch)
	write(t, filepath.Join(out, StatementFile), x.Statement)
	write(t, filepath.Join(out, HeadFile(StatementFile)), x.Head)
	if err := os.Mkdir(filepath.Join(out, CheckpointDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, c := range x.Checkpoints {
		write(t, filepath.Join(out, CheckpointDir, CheckpointFile(uint64(i+1))), c.Checkpoint)
		write(t, filepath.Join(out, CheckpointDir, HeadFile(CheckpointFile(uint64(i+1)))), c.Head)
	}
	got, err := ReadExport(out)
	if err != nil {
		t.Fatal(err)
	}
	x.Proofs = nil
	if !reflect.DeepEqual(got, x) {
		t.Fatal("ReadExport differs from what was written")
	}
	if err := os.Remove(filepath.Join(out, CheckpointDir, HeadFile(CheckpointFile(2)))); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadExport(out); err == nil {
		t.Fatal("ReadExport without the head of checkpoint 2")
	}
}

// FuzzExport verifies arbitrary export files: every answer is one of the
// error classes, or evidence whose proofs are true of its statement and
// whose file is the one encoding of what it parsed to.
func FuzzExport(f *testing.F) {
	s := testSigner(f, 1)
	x := sampleExport(f, s, session1, 1, false)
	f.Add(marshalExport(f, x))
	x.Proofs = x.Proofs[:1]
	f.Add(marshalExport(f, x))
	f.Add([]byte(`{"format":"` + ExportFormat + `","launch":"","statement":"","head":"","checkpoints":[],"proofs":[]}` + "\n"))
	f.Fuzz(func(t *testing.T, file []byte) {
		ev, err := VerifyExport(file, s.Public(), ProofOptions{})
		if err != nil && !errors.Is(err, ErrIncomplete) {
			if !rejected(err) && !errors.Is(err, ErrNotVerified) && !errors.Is(err, ErrChain) {
				t.Fatalf("error of no class: %v", err)
			}
			return
		}
		if errors.Is(err, ErrIncomplete) == ev.Complete() {
			t.Fatalf("ErrIncomplete is %v but Complete is %t", err, ev.Complete())
		}
		for _, p := range ev.Proofs {
			truth(t, ev.Statement, p)
		}
		x, perr := ParseExport(file)
		if perr != nil {
			t.Fatal(perr)
		}
		if again, merr := x.Marshal(); merr != nil || !bytes.Equal(again, file) {
			t.Fatalf("accepted export is not the one encoding: %v", merr)
		}
	})
}
