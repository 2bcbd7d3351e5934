package attest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// signedHead returns a verified statement of session1 and its signed head.
func signedHead(t testing.TB, s *Signer) (*Statement, []byte) {
	t.Helper()
	launchEnv, stEnv := signedPair(t, s)
	st, err := VerifyStatement(stEnv, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	headEnv, err := SignHead(s, HeadOf(st))
	if err != nil {
		t.Fatalf("SignHead: %v", err)
	}
	return st, headEnv
}

func TestHeadRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	st, env := signedHead(t, s)
	h, err := VerifyHead(env, s.Public())
	if err != nil {
		t.Fatalf("VerifyHead: %v", err)
	}
	if !h.Equal(HeadOf(st)) {
		t.Fatalf("verified head %+v is not HeadOf the statement", h)
	}
	if h.Kind != HeadKindStatement || h.Alg != testAlg || h.Count != st.Count || h.Complete {
		t.Fatalf("head %+v", h)
	}
	// No path but a reason's: the statement's other paths are absent.
	for _, e := range st.Entries {
		if e.Path == "src/main.go" {
			continue // a reason's path
		}
		if bytes.Contains(payloadOf(t, env), []byte(`"`+e.Path.String()+`"`)) {
			t.Errorf("head discloses the path %q", e.Path)
		}
	}
	if bytes.Contains(payloadOf(t, env), []byte("killed")) {
		t.Errorf("head discloses a reason's detail")
	}
	if _, err := VerifyHead(env, testSigner(t, 2).Public()); err != ErrNotVerified {
		t.Fatalf("another key: %v", err)
	}
}

func TestHeadKindCheckpoint(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, _ := signedPair(t, s)
	var log CheckpointLog
	cp := sampleCheckpoint(launchEnv)
	env, err := log.Append(s, cp)
	if err != nil {
		t.Fatal(err)
	}
	c, err := VerifyCheckpoint(env, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	headEnv, err := SignHead(s, HeadOfCheckpoint(c))
	if err != nil {
		t.Fatal(err)
	}
	h, err := VerifyHead(headEnv, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != HeadKindCheckpoint || h.Seq != 1 || !bytes.Equal(h.CheckpointHead, c.Log.Root) || !bytes.Equal(h.AppliedRoot, c.Root) {
		t.Fatalf("checkpoint head %+v", h)
	}
}

// sampleCheckpoint is a checkpoint of session1 listing sampleEntries.
func sampleCheckpoint(launchEnv []byte) *Checkpoint {
	st := sampleStatement(launchEnv, session1)
	return &Checkpoint{SessionID: session1, Launch: st.Launch, Workspace: st.Workspace, Taken: st.Ended,
		Probe: digest("probe"), ProbeEntries: 3, Entries: sampleEntries(), Incomplete: st.Incomplete}
}

// TestHeadStrict re-signs altered head payloads with the head's own key:
// each is refused as malformed.
func TestHeadStrict(t *testing.T) {
	s := testSigner(t, 1)
	_, env := signedHead(t, s)
	p := string(payloadOf(t, env))
	alg := `"alg":"` + testAlg + `"`
	other := AlgMLDSA65
	if testAlg == other {
		other = AlgEd25519
	}
	for _, c := range []struct{ name, old, new string }{
		{"unknown member", `"kind":`, `"extra":1,"kind":`},
		{"duplicate member", `"kind":"statement"`, `"kind":"statement","kind":"statement"`},
		{"case variant", `"kind":`, `"Kind":`},
		{"wrong format tag", HeadPredicateType, "https://layerseal.dev/head/v2"},
		{"statement tag", HeadPredicateType, StatementPredicateType},
		{"trailing data", `}}`, `}} {}`},
		{"other algorithm", alg, `"alg":"` + other + `"`},
		{"unknown algorithm", alg, `"alg":"ml-dsa-44"`},
		{"no algorithm", alg + `,`, ``},
		{"key id of an unknown algorithm", `"key_id":"` + testAlg, `"key_id":"ml-dsa-44`},
		{"key id without algorithm", `"key_id":"` + testAlg + `:`, `"key_id":"`},
		{"unknown kind", `"kind":"statement"`, `"kind":"bundle"`},
		{"statement with seq", alg + `,`, alg + `,"seq":"3",`},
		{"complete with reasons", `"complete":false`, `"complete":true`},
		{"reason with detail", `"code":"agent-outlived"`, `"code":"agent-outlived","detail":"x"`},
		{"unknown code", `"code":"agent-outlived"`, `"code":"agent-left"`},
		{"count not decimal string", `"count":"8"`, `"count":8`},
		{"uppercase root", `"root":"`, `"root":"A`},
		{"short launch", `"launch_sha256":"`, `"launch_sha256":"00`},
		{"excluded unsorted", `]}}`, `],"excluded":["b","a"]}}`},
		{"excluded invalid", `]}}`, `],"excluded":["a/../b"]}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !strings.Contains(p, c.old) {
				t.Fatalf("payload lacks %q", c.old)
			}
			q := strings.Replace(p, c.old, c.new, 1)
			_, err := VerifyHead(reseal(t, s, []byte(q)), s.Public())
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
}

// TestHeadTamper changes every member of a head to another valid value and
// re-signs it with another key: never verified under the session's key;
// and the subject's digest must be the root.
func TestHeadTamper(t *testing.T) {
	s := testSigner(t, 1)
	st, env := signedHead(t, s)
	for i := range env {
		m := bytes.Clone(env)
		m[i] ^= 0x01
		if _, err := VerifyHead(m, s.Public()); !rejected(err) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
	}
	h := HeadOf(st)
	for name, f := range map[string]func(*Head){
		"root":          func(h *Head) { h.Root = digest("x") },
		"count":         func(h *Head) { h.Count++ },
		"applied root":  func(h *Head) { h.AppliedRoot = digest("x") },
		"applied count": func(h *Head) { h.AppliedCount++ },
		"session":       func(h *Head) { h.SessionID = session2 },
		"launch":        func(h *Head) { h.Launch = digest("x") },
		"reasons":       func(h *Head) { h.Incomplete = h.Incomplete[:1] },
		"checkpoint":    func(h *Head) { h.CheckpointHead = digest("x") },
		"excluded":      func(h *Head) { h.Excluded = []Path{"node_modules"} },
	} {
		o := *h
		f(&o)
		if o.Equal(h) {
			t.Fatalf("%s: Equal misses the change", name)
		}
		other, err := SignHead(testSigner(t, 2), &o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := VerifyHead(other, s.Public()); err != ErrNotVerified {
			t.Fatalf("%s changed, signed by another key: %v", name, err)
		}
	}
	p := strings.Replace(string(payloadOf(t, env)), `"sha256":"`+hexOrEmpty(st.Root), `"sha256":"`+hexOrEmpty(digest("x")), 1)
	if _, err := VerifyHead(reseal(t, s, []byte(p)), s.Public()); err != ErrNotVerified {
		t.Fatalf("subject digest not the root: %v", err)
	}
}

func TestHeadFile(t *testing.T) {
	for in, want := range map[string]string{"statement.json": "statement.head.json", "000001.json": "000001.head.json", "x": "x.head.json"} {
		if got := HeadFile(in); got != want {
			t.Errorf("HeadFile(%q) = %q, want %q", in, got, want)
		}
	}
}
