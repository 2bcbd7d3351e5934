package attest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// sweptStatement is sampleStatement with exclusions, a reverted and a
// blocked violation, and the applied change set they left.
func sweptStatement(launchEnv []byte) *Statement {
	st := sampleStatement(launchEnv, session1)
	st.Excluded = []Excluded{{Path: "node_modules", Entries: 1<<40 + 1, Bytes: 1<<63 + 9}, {Path: "target", Entries: 1}}
	st.Violations = []Violation{{Path: "old", Rule: "ol?", Action: Reverted}, {Path: "src/main.go", Rule: "src/**", Action: Blocked}}
	for _, e := range st.Entries {
		if e.Path != "old" {
			st.Applied = append(st.Applied, e)
		}
	}
	return st
}

func TestSweptStatementRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, err := SignLaunch(s, sampleLaunch(session1))
	if err != nil {
		t.Fatal(err)
	}
	want := sweptStatement(launchEnv)
	env, err := SignStatement(s, want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyStatement(env, s.Public(), launchEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if len(got.AppliedEntries()) != len(got.Entries)-1 || got.AppliedCount != uint64(len(got.Entries)-1) {
		t.Errorf("applied entries: %d, count %d", len(got.AppliedEntries()), got.AppliedCount)
	}
	if bytes.Equal(got.AppliedRoot, got.Root) {
		t.Error("applied root equals the observed root although an entry was reverted")
	}

	// Every violation reverted, nothing left: applied is empty, not absent.
	empty := sampleStatement(launchEnv, session1)
	empty.Violations = []Violation{{Path: "old", Rule: "**", Action: Reverted}}
	empty.Applied = []Entry{}
	env, err = SignStatement(s, empty)
	if err != nil {
		t.Fatal(err)
	}
	got, err = VerifyStatement(env, s.Public(), launchEnv)
	if err != nil || len(got.AppliedEntries()) != 0 || got.AppliedCount != 0 {
		t.Fatalf("empty applied set: %v, %+v", err, got)
	}

	// No violations: the applied root is the root.
	plain := sampleStatement(launchEnv, session1)
	if _, err := SignStatement(s, plain); err != nil || !bytes.Equal(plain.AppliedRoot, plain.Root) {
		t.Errorf("without violations: %v, applied root %x, root %x", err, plain.AppliedRoot, plain.Root)
	}
}

func TestSweptStatementTamper(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, _ := SignLaunch(s, sampleLaunch(session1))
	env, err := SignStatement(s, sweptStatement(launchEnv))
	if err != nil {
		t.Fatal(err)
	}
	payload := payloadOf(t, env)
	// An applied entry changed and re-signed without a new applied root.
	mut := bytes.Replace(payload, []byte(`"applied":[{"path":".","change":"metadata","old":{"type":"dir","mode":493,"uid":0,"gid":0,"size":"0","mtime_ns":"1"}`),
		[]byte(`"applied":[{"path":".","change":"metadata","old":{"type":"dir","mode":493,"uid":0,"gid":0,"size":"0","mtime_ns":"3"}`), 1)
	if bytes.Equal(mut, payload) {
		t.Fatalf("test did not find the applied entry in %s", payload)
	}
	if _, err := VerifyStatement(reseal(t, s, mut), s.Public(), launchEnv); err != ErrNotVerified {
		t.Errorf("tampered applied entry: got %v, want ErrNotVerified", err)
	}
	// A violation's action flipped: re-signed it is a valid statement of
	// the signer, unsigned it fails.
	flip := bytes.Replace(payload, []byte(`"action":"blocked"`), []byte(`"action":"reverted"`), 1)
	unsigned := bytes.Replace(env, []byte(jsonBase64(payload)), []byte(jsonBase64(flip)), 1)
	if _, err := VerifyStatement(unsigned, s.Public(), launchEnv); err != ErrNotVerified {
		t.Errorf("flipped action without re-signing: got %v", err)
	}
}

func TestSweptStatementRefused(t *testing.T) {
	s := testSigner(t, 1)
	launchEnv, _ := SignLaunch(s, sampleLaunch(session1))
	cases := map[string]func(st *Statement){
		"applied without violations": func(st *Statement) { st.Violations = nil },
		"excluded unsorted":          func(st *Statement) { st.Excluded[0], st.Excluded[1] = st.Excluded[1], st.Excluded[0] },
		"excluded nested":            func(st *Statement) { st.Excluded[1].Path = "node_modules/x" },
		"excluded root":              func(st *Statement) { st.Excluded[0].Path = Root },
		"unknown action":             func(st *Statement) { st.Violations[0].Action = "ignored" },
		"empty rule":                 func(st *Statement) { st.Violations[0].Rule = "" },
		"violations unsorted":        func(st *Statement) { st.Violations[0], st.Violations[1] = st.Violations[1], st.Violations[0] },
		"applied unsorted":           func(st *Statement) { st.Applied[0], st.Applied[1] = st.Applied[1], st.Applied[0] },
	}
	for name, mutate := range cases {
		st := sweptStatement(launchEnv)
		mutate(st)
		if _, err := SignStatement(s, st); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
	// And a decoder refuses the same when an honest-looking signer wrote it.
	st := sweptStatement(launchEnv)
	env, _ := SignStatement(s, st)
	p := bytes.Replace(payloadOf(t, env), []byte(`"action":"blocked"`), []byte(`"action":"ignored"`), 1)
	if _, err := VerifyStatement(reseal(t, s, p), s.Public(), launchEnv); !errors.Is(err, ErrMalformed) {
		t.Errorf("unknown action re-signed: got %v, want ErrMalformed", err)
	}
}
