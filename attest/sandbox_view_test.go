package attest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestSandboxView: the view and the read-only paths survive signing and
// verifying (paths as bytes); a record without them (made before views)
// verifies and reads as the host view; an unknown view or a relative path
// is refused when signing.
func TestSandboxView(t *testing.T) {
	s := testSigner(t, 1)
	for _, c := range []struct {
		view string
		ro   []string
	}{{"minimal", []string{"/usr", "/etc", "/opt/sdk\xff"}}, {"host", nil}, {"minimal", nil}} {
		lr := sampleLaunch(NewSessionID())
		lr.Sandbox.View, lr.Sandbox.ReadOnly = c.view, c.ro
		env, err := SignLaunch(s, lr)
		if err != nil {
			t.Fatalf("sign view %q, read-only %q: %v", c.view, c.ro, err)
		}
		got, err := VerifyLaunch(env, s.Public())
		if err != nil {
			t.Fatalf("verify view %q: %v", c.view, err)
		}
		if got.Sandbox.View != c.view || !reflect.DeepEqual(got.Sandbox.ReadOnly, c.ro) || got.Sandbox.HostView() != (c.view == "host") {
			t.Errorf("view %q, read-only %q read back as %q, %q", c.view, c.ro, got.Sandbox.View, got.Sandbox.ReadOnly)
		}
	}
	lr := sampleLaunch(NewSessionID())
	lr.Sandbox.View, lr.Sandbox.ReadOnly = "minimal", []string{"/usr"}
	env, err := SignLaunch(s, lr)
	if err != nil {
		t.Fatal(err)
	}
	p := payloadOf(t, env)
	// The members are the sandbox's last.
	old := bytes.Replace(p, []byte(`,"view":"minimal","read_only":["/usr"]}`), []byte("}"), 1)
	if bytes.Equal(old, p) {
		t.Fatalf("no view and read_only members at the end of the sandbox in %s", p)
	}
	got, err := VerifyLaunch(reseal(t, s, fixLaunchSubject(old)), s.Public())
	if err != nil {
		t.Fatalf("record without view: %v", err)
	}
	if got.Sandbox.View != "" || got.Sandbox.ReadOnly != nil || !got.Sandbox.HostView() {
		t.Errorf("record without view reads as view %q, read-only %q", got.Sandbox.View, got.Sandbox.ReadOnly)
	}
	for _, bad := range []Sandbox{{View: "all"}, {View: "minimal", ReadOnly: []string{"usr"}}, {View: "minimal", ReadOnly: []string{""}}} {
		lr := sampleLaunch(NewSessionID())
		lr.Sandbox.View, lr.Sandbox.ReadOnly = bad.View, bad.ReadOnly
		if _, err := SignLaunch(s, lr); err == nil {
			t.Errorf("view %q, read-only %q signed", bad.View, bad.ReadOnly)
		} else if errors.Is(err, ErrNotVerified) {
			t.Errorf("view %q: %v", bad.View, err)
		}
	}
}
