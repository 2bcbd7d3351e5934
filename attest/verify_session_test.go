package attest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeSession writes an output dir of session1 as a run leaves it: the
// launch record, n checkpoints (sampleChain) and a statement bound to the
// last one, complete or not. It returns the dir.
func writeSession(t *testing.T, s *Signer, n int, complete bool) string {
	t.Helper()
	out := t.TempDir()
	launch, envs, _ := sampleChain(t, s, n, session1)
	st := sampleStatement(launch, session1)
	if complete {
		st.Complete, st.Incomplete = true, nil
	}
	if n > 0 {
		st.CheckpointHead = sha(envs[n-1])
		if err := os.Mkdir(filepath.Join(out, CheckpointDir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i, env := range envs {
		write(t, filepath.Join(out, CheckpointDir, CheckpointFile(uint64(i+1))), env)
	}
	stEnv, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(out, LaunchFile), launch)
	write(t, filepath.Join(out, StatementFile), stEnv)
	return out
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestVerifySessionComplete(t *testing.T) {
	s := testSigner(t, 1)
	out := writeSession(t, s, 4, true)
	a, err := VerifySession(out, s.Public())
	if err != nil {
		t.Fatalf("VerifySession: %v", err)
	}
	if a.Statement == nil || a.Checkpoint != nil || a.Launch != nil {
		t.Fatalf("artifact holds statement %t, checkpoint %t, launch %t; want only the statement", a.Statement != nil, a.Checkpoint != nil, a.Launch != nil)
	}
	if !a.Verified || !a.LaunchChecked || !a.Complete() || a.SessionID() != session1 {
		t.Errorf("verified %t, launch checked %t, complete %t, session %q",
			a.Verified, a.LaunchChecked, a.Complete(), a.SessionID())
	}
	if len(a.Chain) != 4 || a.ChainDir != filepath.Join(out, CheckpointDir) {
		t.Errorf("chain of %d in %q; want 4 in the checkpoints dir", len(a.Chain), a.ChainDir)
	}
	if len(a.Entries) != len(sampleEntries()) {
		t.Errorf("%d entries, want %d", len(a.Entries), len(sampleEntries()))
	}
}

// A statement that verifies but is incomplete is ErrIncomplete, with the
// artifact and its reasons.
func TestVerifySessionIncomplete(t *testing.T) {
	s := testSigner(t, 1)
	out := writeSession(t, s, 0, false)
	a, err := VerifySession(out, s.Public())
	if !errors.Is(err, ErrIncomplete) || errors.Is(err, ErrNotVerified) {
		t.Fatalf("incomplete statement: %v; want ErrIncomplete only", err)
	}
	if a == nil || a.Complete() || len(a.Incomplete()) != 2 {
		t.Fatalf("artifact %+v; want incomplete with 2 reasons", a)
	}
	if len(a.Chain) != 0 {
		t.Errorf("a session without checkpoints: chain of %d", len(a.Chain))
	}
}

// Each way a session fails to verify is ErrNotVerified, ErrMalformed or
// ErrChain, and says which check failed where one is cryptographic.
func TestVerifySessionFailures(t *testing.T) {
	s, other := testSigner(t, 1), testSigner(t, 2)
	for _, tc := range []struct {
		name  string
		key   *Signer
		spoil func(t *testing.T, out string)
		want  error
		says  string
	}{
		{name: "wrong key", key: other, want: ErrNotVerified, says: "signed with key"},
		{name: "altered statement", key: s, want: ErrNotVerified, says: "altered or corrupted", spoil: func(t *testing.T, out string) {
			p := filepath.Join(out, StatementFile)
			b, _ := os.ReadFile(p)
			i := bytes.Index(b, []byte(`"sig":"`)) + len(`"sig":"`)
			b[i] = map[bool]byte{true: 'B', false: 'A'}[b[i] == 'A'] // another signature, still base64
			write(t, p, b)
		}},
		{name: "other session's launch record", key: s, want: ErrNotVerified, says: "not bound to the launch record", spoil: func(t *testing.T, out string) {
			l, err := SignLaunch(s, sampleLaunch(session2))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(out, LaunchFile), l)
		}},
		{name: "launch record of another key", key: s, want: ErrNotVerified, says: "launch record given with --launch does not verify", spoil: func(t *testing.T, out string) {
			l, err := SignLaunch(other, sampleLaunch(session1))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(out, LaunchFile), l)
		}},
		{name: "malformed statement", key: s, want: ErrMalformed, spoil: func(t *testing.T, out string) {
			write(t, filepath.Join(out, StatementFile), []byte(`{"payloadType":1}`))
		}},
		{name: "missing checkpoint", key: s, want: ErrChain, spoil: func(t *testing.T, out string) {
			if err := os.Remove(filepath.Join(out, CheckpointDir, CheckpointFile(2))); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "stray checkpoint name", key: s, want: ErrChain, spoil: func(t *testing.T, out string) {
			write(t, filepath.Join(out, CheckpointDir, "7.json"), []byte("{}"))
		}},
		{name: "last checkpoint gone", key: s, want: ErrNotVerified, spoil: func(t *testing.T, out string) {
			if err := os.Remove(filepath.Join(out, CheckpointDir, CheckpointFile(4))); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "checkpoint of another chain", key: s, want: ErrNotVerified, spoil: func(t *testing.T, out string) {
			_, envs, _ := sampleChain(t, s, 4, session2)
			write(t, filepath.Join(out, CheckpointDir, CheckpointFile(3)), envs[2])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := writeSession(t, s, 4, true)
			if tc.spoil != nil {
				tc.spoil(t, out)
			}
			a, err := VerifySession(out, tc.key.Public())
			if !errors.Is(err, tc.want) || a != nil {
				t.Fatalf("got %v (artifact %t); want %v", err, a != nil, tc.want)
			}
			if errors.Is(err, ErrIncomplete) {
				t.Errorf("a failure is also ErrIncomplete: %v", err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("%q does not say %q", err, tc.says)
			}
		})
	}
}

// A statement naming a last checkpoint, with no chain beside it, does not
// verify: the chain it commits to is missing; given another dir, it is
// checked.
func TestVerifyStatementChainElsewhere(t *testing.T) {
	s := testSigner(t, 1)
	out := writeSession(t, s, 2, true)
	moved := filepath.Join(t.TempDir(), "cps")
	if err := os.Rename(filepath.Join(out, CheckpointDir), moved); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, StatementFile)
	env, launch := read(t, path), read(t, filepath.Join(out, LaunchFile))
	if _, err := Verify(path, env, s.Public(), VerifyOptions{Launch: launch}); !errors.Is(err, ErrChain) || !strings.Contains(err.Error(), "no checkpoints dir") {
		t.Fatalf("without the chain: %v, want it named missing", err)
	}
	a, err := Verify(path, env, s.Public(), VerifyOptions{Launch: launch, Checkpoints: moved})
	if err != nil || len(a.Chain) != 2 {
		t.Fatalf("with --checkpoints: %v", err)
	}
	// An empty dir given for a statement bound to a chain does not verify.
	if _, err := Verify(path, env, s.Public(), VerifyOptions{Checkpoints: t.TempDir()}); !errors.Is(err, ErrNotVerified) {
		t.Errorf("statement with a head verified against no checkpoints: %v", err)
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := ReadArtifact(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Verify of a checkpoint checks the chain up to it and resolves all its
// changes; of a launch record, its signature.
func TestVerifyCheckpointAndLaunch(t *testing.T) {
	s := testSigner(t, 1)
	out := writeSession(t, s, 5, true)
	launch := read(t, filepath.Join(out, LaunchFile))
	for seq, complete := range map[uint64]bool{4: true, 5: false} {
		path := filepath.Join(out, CheckpointDir, CheckpointFile(seq))
		a, err := Verify(path, read(t, path), s.Public(), VerifyOptions{Launch: launch})
		if complete != (err == nil) || !complete && !errors.Is(err, ErrIncomplete) {
			t.Fatalf("checkpoint %d: %v", seq, err)
		}
		if a.Checkpoint == nil || a.Checkpoint.Seq != seq || len(a.Chain) != int(seq) || !a.LaunchChecked {
			t.Fatalf("checkpoint %d: artifact %+v", seq, a)
		}
		if want := sampleListAt(int(seq)); !slices.EqualFunc(a.Entries, want, sameEntry) {
			t.Errorf("checkpoint %d: %d changes resolved, want %d", seq, len(a.Entries), len(want))
		}
	}
	// A checkpoint bound to another launch record does not verify.
	other, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, CheckpointDir, CheckpointFile(2))
	if _, err := Verify(path, read(t, path), s.Public(), VerifyOptions{Launch: other}); !errors.Is(err, ErrNotVerified) {
		t.Errorf("checkpoint with another launch record: %v", err)
	}
	// A checkpoint file that is not the one of its seq in its directory.
	moved := filepath.Join(t.TempDir(), CheckpointFile(2))
	write(t, moved, read(t, filepath.Join(out, CheckpointDir, CheckpointFile(3))))
	if _, err := Verify(moved, read(t, moved), s.Public(), VerifyOptions{}); !errors.Is(err, ErrChain) {
		t.Errorf("checkpoint 3 alone in another dir: %v", err)
	}

	a, err := Verify(filepath.Join(out, LaunchFile), launch, s.Public(), VerifyOptions{})
	if err != nil || a.Launch == nil || a.Launch.SessionID != session1 || !a.Complete() {
		t.Fatalf("launch record: %v", err)
	}
	if _, err := Verify(filepath.Join(out, LaunchFile), launch, testSigner(t, 2).Public(), VerifyOptions{}); !errors.Is(err, ErrNotVerified) {
		t.Errorf("launch record with another key: %v", err)
	}
}

func sameEntry(a, b Entry) bool { return bytes.Equal(a.MarshalLeaf(), b.MarshalLeaf()) }

// Diff compares two points of one session read by Load, with or without
// a key, and refuses two sessions.
func TestDiffPoints(t *testing.T) {
	s := testSigner(t, 1)
	out := writeSession(t, s, 8, true)
	load := func(path string, key bool) *Artifact {
		t.Helper()
		var pub PublicKey
		if key {
			pub = s.Public()
		}
		a, err := Load(path, read(t, path), pub)
		if err != nil {
			t.Fatalf("Load %s: %v", filepath.Base(path), err)
		}
		return a
	}
	cp := func(seq uint64) string { return filepath.Join(out, CheckpointDir, CheckpointFile(seq)) }
	for _, key := range []bool{false, true} {
		d, err := Diff(load(cp(2), key), load(cp(8), key))
		if err != nil {
			t.Fatal(err)
		}
		if want := DiffEntries(sampleListAt(2), sampleListAt(8)); !slices.Equal(kinds(d), kinds(want)) || len(d) == 0 {
			t.Errorf("key %t: diff %v, want %v", key, d, want)
		}
		if d, err := Diff(load(cp(8), key), load(filepath.Join(out, StatementFile), key)); err != nil || len(d) == 0 {
			t.Errorf("key %t: checkpoint to statement: %v, %v", key, d, err)
		}
	}
	other := writeSession(t, s, 0, true)
	ls, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	st2 := sampleStatement(ls, session2)
	env, err := SignStatement(s, st2)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(other, StatementFile), env)
	if _, err := Diff(load(cp(2), true), load(filepath.Join(other, StatementFile), true)); !errors.Is(err, ErrOtherSession) {
		t.Errorf("two sessions: %v; want ErrOtherSession", err)
	}
	// A statement read with the wrong key is refused.
	path := filepath.Join(out, StatementFile)
	if _, err := Load(path, read(t, path), testSigner(t, 2).Public()); !errors.Is(err, ErrNotVerified) {
		t.Errorf("Load with another key: %v", err)
	}
}

// kinds is ds without their states: what changed, not the states.
func kinds(ds []Difference) []Difference {
	out := slices.Clone(ds)
	for i := range out {
		out[i].From, out[i].To = nil, nil
	}
	return out
}

func TestDiffEntries(t *testing.T) {
	file := func(size uint64, d string, mode uint32) *State {
		return &State{Type: File, Mode: mode, Size: size, SHA256: digest(d)}
	}
	dir := &State{Type: Dir, Mode: 0o755}
	from := []Entry{
		{Path: "a", Change: Added, New: file(1, "a", 0o644)},                              // gone: deleted
		{Path: "b", Change: Modified, Old: file(1, "b", 0o644), New: file(1, "c", 0o644)}, // back as in the lower layer
		{Path: "c", Change: Modified, Old: file(1, "x", 0o644), New: file(1, "y", 0o644)}, // same in both
		{Path: "d", Change: Modified, Old: file(1, "x", 0o644), New: file(1, "y", 0o644)},
		{Path: "e", Change: Added, New: file(1, "e", 0o644)},
		{Path: "f", Change: Added, New: dir},
	}
	to := []Entry{
		{Path: "c", Change: Modified, Old: file(1, "x", 0o644), New: file(1, "y", 0o644)},
		{Path: "d", Change: Modified, Old: file(1, "x", 0o644), New: file(1, "z", 0o644)},
		{Path: "e", Change: Added, New: file(1, "e", 0o600)},
		{Path: "f", Change: Added, New: file(0, "", 0o644)},
		{Path: "g", Change: Added, New: dir},
		{Path: "h", Change: Replaced, Old: dir, New: dir},
	}
	got := DiffEntries(from, to)
	want := []Difference{
		{Path: "a", Change: Deleted, Old: File},
		{Path: "b", Change: Modified, Type: File, Old: File},
		{Path: "d", Change: Modified, Type: File, Old: File},
		{Path: "e", Change: Metadata, Type: File, Old: File},
		{Path: "f", Change: TypeChange, Type: File, Old: Dir},
		{Path: "g", Change: Added, Type: Dir},
		{Path: "h", Change: Replaced, Type: Dir, Old: Dir},
	}
	if !slices.Equal(kinds(got), want) {
		t.Errorf("DiffEntries:\n got %v\nwant %v", kinds(got), want)
	}
	// From and To are the states at each point: e's modes, a's deletion.
	if len(got) == len(want) && (got[3].From.Mode != 0o644 || got[3].To.Mode != 0o600 || got[0].From == nil || got[0].To != nil) {
		t.Errorf("DiffEntries: states e %+v -> %+v, a %+v -> %+v", got[3].From, got[3].To, got[0].From, got[0].To)
	}
}

// TestLooksLikeCheckpoint: only digits then ".json" name a checkpoint; the
// files beside one (its head, a log receipt) do not.
func TestLooksLikeCheckpoint(t *testing.T) {
	for name, want := range map[string]bool{
		"000001.json": true, "12.json": true,
		"000001.head.json": false, "000001.log-receipt.json": false, ".json": false, "000001.json~": false,
		"0001a.json": false, "000001.JSON": false, "head.json": false, "000001": false,
	} {
		if got := LooksLikeCheckpoint(name); got != want {
			t.Errorf("LooksLikeCheckpoint(%q) = %v, want %v", name, got, want)
		}
	}
}
