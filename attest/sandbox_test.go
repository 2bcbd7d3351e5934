package attest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestSandboxScoped: the Landlock scopes survive signing and verifying,
// no scopes read back as none and are left out of the record, so
// that a record made before the member existed verifies as before, and scopes that are unknown, repeated or out of
// order are refused when signing.
func TestSandboxScoped(t *testing.T) {
	s := testSigner(t, 1)
	for _, scoped := range [][]string{{"abstract_unix_socket", "signal"}, {"signal"}, nil} {
		lr := sampleLaunch(NewSessionID())
		lr.Sandbox.Scoped = scoped
		env, err := SignLaunch(s, lr)
		if err != nil {
			t.Fatalf("sign with scopes %q: %v", scoped, err)
		}
		got, err := VerifyLaunch(env, s.Public())
		if err != nil {
			t.Fatalf("verify with scopes %q: %v", scoped, err)
		}
		if !reflect.DeepEqual(got.Sandbox.Scoped, scoped) {
			t.Errorf("scopes %q read back as %q", scoped, got.Sandbox.Scoped)
		}
	}
	lr := sampleLaunch(NewSessionID())
	env, err := SignLaunch(s, lr)
	if err != nil {
		t.Fatal(err)
	}
	p := payloadOf(t, env)
	old := bytes.Replace(p, []byte(`"scoped":["abstract_unix_socket","signal"],`), nil, 1)
	if bytes.Equal(old, p) {
		t.Fatalf("no scoped member in %s", p)
	}
	got, err := VerifyLaunch(reseal(t, s, fixLaunchSubject(old)), s.Public())
	if err != nil {
		t.Fatalf("record without scoped: %v", err)
	}
	if got.Sandbox.Scoped != nil {
		t.Errorf("record without scoped reads as scoped by %q", got.Sandbox.Scoped)
	}
	for _, bad := range [][]string{{"signal", "abstract_unix_socket"}, {"signal", "signal"}, {"net"}, {""}} {
		lr := sampleLaunch(NewSessionID())
		lr.Sandbox.Scoped = bad
		if _, err := SignLaunch(s, lr); err == nil {
			t.Errorf("scopes %q signed", bad)
		} else if errors.Is(err, ErrNotVerified) {
			t.Errorf("scopes %q: %v", bad, err)
		}
	}
}
