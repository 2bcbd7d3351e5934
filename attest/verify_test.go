package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
)

// payloadOf returns the payload of an envelope file without verifying it.
func payloadOf(t testing.TB, env []byte) []byte {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatalf("decode envelope: %v", err)
	}
	return e.Payload
}

// reseal signs payload with s as it is.
func reseal(t testing.TB, s *Signer, payload []byte) []byte {
	t.Helper()
	env, err := seal(s, payload)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	l := sampleLaunch(session1)
	launchEnv, err := SignLaunch(s, l)
	if err != nil {
		t.Fatal(err)
	}
	if l.KeyID != s.KeyID() {
		t.Errorf("SignLaunch set KeyID %q, want %q", l.KeyID, s.KeyID())
	}
	gotL, err := VerifyLaunch(launchEnv, s.Public())
	if err != nil {
		t.Fatalf("VerifyLaunch: %v", err)
	}
	if !reflect.DeepEqual(gotL, l) {
		t.Errorf("VerifyLaunch =\n%+v\nwant\n%+v", gotL, l)
	}

	st := sampleStatement(launchEnv, session1)
	stEnv, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := MerkleRoot(st.Entries)
	if !bytes.Equal(st.Root, root) || st.Count != uint64(len(st.Entries)) || st.Complete || st.KeyID != s.KeyID() {
		t.Errorf("SignStatement derived fields: root %x count %d complete %t key %s", st.Root, st.Count, st.Complete, st.KeyID)
	}
	for _, launch := range [][]byte{nil, launchEnv} {
		got, err := VerifyStatement(stEnv, s.Public(), launch)
		if err != nil {
			t.Fatalf("VerifyStatement: %v", err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Errorf("VerifyStatement =\n%+v\nwant\n%+v", got, st)
		}
	}
	if !bytes.HasSuffix(stEnv, []byte("}\n")) || bytes.Count(stEnv, []byte("\n")) != 1 {
		t.Errorf("envelope file is not one line of JSON and a newline")
	}

	// Signing is deterministic: the same statement gives the same bytes.
	again, err := SignStatement(s, sampleStatement(launchEnv, session1))
	if err != nil || !bytes.Equal(again, stEnv) {
		t.Errorf("signing again gave different bytes (%v)", err)
	}
}

func TestStatementCompleteAndEmpty(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, _ := signedPair(t, s)
	st := sampleStatement(launchEnv, session1)
	st.Incomplete, st.Entries = nil, nil
	st.CheckpointHead = digest("checkpoint")
	env, err := SignStatement(s, st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyStatement(env, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	empty := sha256.Sum256(nil)
	if !got.Complete || got.Count != 0 || !bytes.Equal(got.Root, empty[:]) || !bytes.Equal(got.CheckpointHead, st.CheckpointHead) {
		t.Errorf("empty complete statement verified as %+v", got)
	}
	p := payloadOf(t, env)
	for _, want := range []string{`"complete":true`, `"incomplete":[]`, `"changes":[]`, `"count":"0"`, `"checkpoint_head":"`} {
		if !bytes.Contains(p, []byte(want)) {
			t.Errorf("payload lacks %s: %s", want, p)
		}
	}
}

func TestSignRefusesInvalid(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, _ := signedPair(t, s)
	badStatements := map[string]func(st *Statement){
		"unsorted":            func(st *Statement) { st.Entries[1], st.Entries[2] = st.Entries[2], st.Entries[1] },
		"duplicate":           func(st *Statement) { st.Entries[2].Path = st.Entries[1].Path },
		"bad path":            func(st *Statement) { st.Entries[1].Path = "bin/" },
		"unknown change":      func(st *Statement) { st.Entries[1].Change = "moved" },
		"added with old":      func(st *Statement) { st.Entries[2].Old = &State{Type: Dir} },
		"deleted with new":    func(st *Statement) { st.Entries[4].New = &State{Type: File} },
		"modified no new":     func(st *Statement) { st.Entries[6].New = nil },
		"short digest":        func(st *Statement) { st.Entries[6].New.SHA256 = []byte{1} },
		"digest on dir":       func(st *Statement) { st.Entries[5].New.SHA256 = digest("x") },
		"unknown type":        func(st *Statement) { st.Entries[7].New.Type = "door" },
		"mode bits":           func(st *Statement) { st.Entries[7].New.Mode = 0o170000 },
		"target on file":      func(st *Statement) { st.Entries[6].New.Target = "x" },
		"symlink no target":   func(st *Statement) { st.Entries[1].Old.Target = "" },
		"rdev on fifo":        func(st *Statement) { st.Entries[7].New.Rdev = 1 },
		"size on dir":         func(st *Statement) { st.Entries[5].New.Size = 1 },
		"xattrs unsorted":     func(st *Statement) { x := st.Entries[3].New.Xattrs; x[0], x[1] = x[1], x[0] },
		"link on dir":         func(st *Statement) { st.Entries[5].New.Link = "a" },
		"bad link":            func(st *Statement) { st.Entries[3].New.Link = "/abs" },
		"typechange same":     func(st *Statement) { st.Entries[1].New.Type = Symlink; st.Entries[1].New.Target = "t" },
		"modified other type": func(st *Statement) { st.Entries[6].New = &State{Type: FIFO} },
		"replaced file":       func(st *Statement) { st.Entries[5].New = &State{Type: File} },
		"unknown code":        func(st *Statement) { st.Incomplete[0].Code = "bad-luck" },
		"reason path":         func(st *Statement) { st.Incomplete[0].Path = "../x" },
		"session id":          func(st *Statement) { st.SessionID = "XYZ" },
		"launch digest":       func(st *Statement) { st.Launch = st.Launch[:5] },
		"workspace":           func(st *Statement) { st.Workspace = "" },
		"signal":              func(st *Statement) { st.Exit.Signal = "kill -9" },
		"checkpoint head":     func(st *Statement) { st.CheckpointHead = []byte{1} },
		"nul in detail":       func(st *Statement) { st.Incomplete[0].Detail = "a\x00" },
	}
	for name, mutate := range badStatements {
		st := sampleStatement(launchEnv, session1)
		mutate(st)
		if _, err := SignStatement(s, st); err == nil {
			t.Errorf("SignStatement accepted %s", name)
		}
	}
	badLaunches := map[string]func(l *LaunchRecord){
		"session id":       func(l *LaunchRecord) { l.SessionID = session1[:30] },
		"workspace":        func(l *LaunchRecord) { l.Workspace = "a\x00" },
		"mount id unknown": func(l *LaunchRecord) { l.Lower.MountIDKnown = false },
		"no argv":          func(l *LaunchRecord) { l.Agent.Args = nil },
		"invalid env":      func(l *LaunchRecord) { l.Agent.Env = []string{"A=\xff"} },
		"negative cap":     func(l *LaunchRecord) { l.Policy.DigestCap = -1 },
		"bad exclude":      func(l *LaunchRecord) { l.Policy.Exclude = []Path{"a//b"} },
		"release":          func(l *LaunchRecord) { l.Kernel.Release = "6.1\n" },
		"empty option":     func(l *LaunchRecord) { l.Overlay.Options = []string{""} },
	}
	for name, mutate := range badLaunches {
		l := sampleLaunch(session1)
		mutate(l)
		if _, err := SignLaunch(s, l); err == nil {
			t.Errorf("SignLaunch accepted %s", name)
		}
	}
}

func TestVerifyWrongKeyAndBinding(t *testing.T) {
	s, other := testSigner(t, 1), testSigner(t, 2)
	launchEnv, stEnv := signedPair(t, s)

	if _, err := VerifyStatement(stEnv, other.Public(), nil); err != ErrNotVerified {
		t.Errorf("statement with wrong key: %v", err)
	}
	if _, err := VerifyLaunch(launchEnv, other.Public()); err != ErrNotVerified {
		t.Errorf("launch with wrong key: %v", err)
	}

	// A launch record of another session, signed with the same key.
	otherLaunch, err := SignLaunch(s, sampleLaunch(session2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyStatement(stEnv, s.Public(), otherLaunch); err != ErrNotVerified {
		t.Errorf("statement paired with another session's launch: %v", err)
	}
	// A statement that claims that session and digest but was made for
	// session1's key still fails to pair with session1's launch.
	st2 := sampleStatement(otherLaunch, session2)
	stEnv2, err := SignStatement(s, st2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyStatement(stEnv2, s.Public(), launchEnv); err != ErrNotVerified {
		t.Errorf("session2 statement paired with session1 launch: %v", err)
	}
	if _, err := VerifyStatement(stEnv2, s.Public(), otherLaunch); err != nil {
		t.Errorf("session2 statement with its own launch: %v", err)
	}
	// Same session, different launch record bytes.
	l := sampleLaunch(session1)
	l.ToolVersion = "layerseal v0.1.1"
	relaunch, _ := SignLaunch(s, l)
	if _, err := VerifyStatement(stEnv, s.Public(), relaunch); err != ErrNotVerified {
		t.Errorf("statement paired with an altered launch: %v", err)
	}
	// A launch record signed by another key.
	foreign, _ := SignLaunch(other, sampleLaunch(session1))
	if _, err := VerifyStatement(stEnv, s.Public(), foreign); err != ErrNotVerified {
		t.Errorf("statement paired with a foreign launch: %v", err)
	}
	// Statement and launch record are not interchangeable.
	if _, err := VerifyStatement(launchEnv, s.Public(), nil); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "unsupported format") {
		t.Errorf("launch verified as statement: %v", err)
	}
	if _, err := VerifyLaunch(stEnv, s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("statement verified as launch: %v", err)
	}
	if _, err := VerifyStatement(stEnv, PublicKey{}, nil); err == nil {
		t.Error("no public key accepted")
	}
}

func TestVerifyMalformed(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, stEnv := signedPair(t, s)
	p := string(payloadOf(t, stEnv))
	lp := string(payloadOf(t, launchEnv))

	replace := func(src, old, new string) []byte {
		if !strings.Contains(src, old) {
			t.Fatalf("payload lacks %q", old)
		}
		return []byte(strings.Replace(src, old, new, 1))
	}
	payloads := map[string][]byte{
		"trailing data":       []byte(p + "{}"),
		"trailing newline":    []byte(p + "\n"),
		"leading space":       []byte(" " + p),
		"duplicate name":      replace(p, `"predicate":{`, `"predicate":{"complete":false,`),
		"duplicate top name":  replace(p, `{"_type":`, `{"_type":"x","_type":`),
		"case-variant name":   replace(p, `"session_id"`, `"Session_id"`),
		"case-variant top":    replace(p, `"predicateType"`, `"PredicateType"`),
		"unknown member":      replace(p, `"predicate":{`, `"predicate":{"extra":1,`),
		"unknown in entry":    replace(p, `"change":"modified",`, `"change":"modified","why":"x",`),
		"unknown in envelope": replace(p, `{"_type"`, `{"x":1,"_type"`),
		"invalid UTF-8":       replace(p, `"detail":"file`, "\"detail\":\"\xfffile"),
		"escaped letter":      replace(p, `"session_id"`, `"session_\u0069d"`),
		"whitespace":          replace(p, `"count":`, `"count": `),
		"uppercase hex root":  []byte(strings.Replace(p, `"root":"34d3`, `"root":"34D3`, 1)),
		"number not string":   replace(p, `"count":"8"`, `"count":8`),
		"leading zero":        replace(p, `"count":"8"`, `"count":"08"`),
		"null old":            replace(p, `"change":"added","new"`, `"change":"added","old":null,"new"`),
		"empty digest":        replace(p, `"mtime_ns":"0","sha256":"ba78`, `"mtime_ns":"0","sha256":"","sha256x":"ba78`),
		"other version":       replace(p, StatementPredicateType, "https://layerseal.dev/statement/v2"),
		"other in-toto":       replace(p, StatementType, "https://in-toto.io/Statement/v0.1"),
		"two subjects":        replace(p, `"subject":[{`, `"subject":[{"name":"x","digest":{"sha256":"00"}},{`),
		"subject name":        replace(p, `"workspace-changes"`, `"workspace"`),
		"not JSON":            []byte("hello"),
		"empty":               nil,
		"array":               []byte("[]"),
	}
	for name, payload := range payloads {
		if name == "uppercase hex root" && !strings.Contains(p, `"root":"34d3`) {
			t.Fatalf("sample root changed: fix the test")
		}
		_, err := VerifyStatement(reseal(t, s, payload), s.Public(), nil)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %v, want ErrMalformed", name, err)
		}
	}
	if _, err := VerifyLaunch(reseal(t, s, replace(lp, `"tool_version"`, `"Tool_version"`)), s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("launch with case-variant name: %v", err)
	}
	if _, err := VerifyLaunch(reseal(t, s, replace(lp, `"noNewPrivileges":true`, `"noNewPrivileges":true,"nonewprivileges":false`)), s.Public()); !errors.Is(err, ErrMalformed) {
		t.Errorf("launch with case-variant agent member: %v", err)
	}

	env := string(stEnv)
	envelopes := map[string][]byte{
		"trailing data":     []byte(env + "{}"),
		"no newline":        []byte(strings.TrimSuffix(env, "\n")),
		"two newlines":      []byte(env + "\n"),
		"pretty":            []byte(strings.Replace(env, `","payload"`, `", "payload"`, 1)),
		"payload type":      []byte(strings.Replace(env, PayloadType, "application/json", 1)),
		"no signatures":     []byte(env[:strings.Index(env, `"signatures"`)] + `"signatures":[]}` + "\n"),
		"two signatures":    []byte(strings.Replace(env, `"signatures":[{`, `"signatures":[{"keyid":"","sig":""},{`, 1)),
		"unknown member":    []byte(strings.Replace(env, `{"payloadType"`, `{"x":0,"payloadType"`, 1)),
		"case variant":      []byte(strings.Replace(env, `"payloadType"`, `"PayloadType"`, 1)),
		"duplicate":         []byte(strings.Replace(env, `{"payloadType"`, `{"payloadType":"x","payloadType"`, 1)),
		"url base64":        []byte(strings.Replace(env, `"payload":"`, `"payload":"-_`, 1)),
		"invalid UTF-8":     []byte(strings.Replace(env, `"keyid":"`, "\"keyid\":\"\xff", 1)),
		"launch over limit": append(bytes.Repeat([]byte(" "), MaxLaunchSize+1-len(launchEnv)), launchEnv...),
		"array":             []byte("[]\n"),
		"empty":             nil,
		"statement too big": make([]byte, MaxStatementSize+1),
	}
	for name, e := range envelopes {
		var err error
		if strings.HasPrefix(name, "launch") {
			_, err = VerifyLaunch(e, s.Public())
		} else {
			_, err = VerifyStatement(e, s.Public(), nil)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("envelope %s: got %v, want ErrMalformed", name, err)
		}
	}
	// A statement paired with a malformed launch record is malformed too.
	if _, err := VerifyStatement(stEnv, s.Public(), []byte("{}\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("malformed launch: %v", err)
	}
	// Padding-free base64 of the same payload is another spelling.
	unpadded := strings.Replace(env, base64.StdEncoding.EncodeToString(payloadOf(t, stEnv)), base64.RawStdEncoding.EncodeToString(payloadOf(t, stEnv)), 1)
	if unpadded != env {
		if _, err := VerifyStatement([]byte(unpadded), s.Public(), nil); !errors.Is(err, ErrMalformed) {
			t.Errorf("unpadded base64: %v", err)
		}
	}
}
