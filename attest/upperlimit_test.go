package attest

import (
	"bytes"
	"errors"
	"testing"
)

// TestPolicyUpperLimits: max_upper and min_free survive signing and
// verifying, come last in the policy, are left out when 0 (so a record
// made before they existed verifies as before), and a negative one is
// refused when signing.
func TestPolicyUpperLimits(t *testing.T) {
	s := testSigner(t, 1)
	lr := sampleLaunch(NewSessionID())
	lr.Policy.MaxUpper, lr.Policy.MinFree = 8<<20, 5<<30
	env, err := SignLaunch(s, lr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyLaunch(env, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if got.Policy.MaxUpper != 8<<20 || got.Policy.MinFree != 5<<30 {
		t.Errorf("max upper %d, min free %d read back as %d, %d", lr.Policy.MaxUpper, lr.Policy.MinFree, got.Policy.MaxUpper, got.Policy.MinFree)
	}
	if p := payloadOf(t, env); !bytes.Contains(p, []byte(`"apply":"auto","max_upper":"8388608","min_free":"5368709120"}`)) {
		t.Errorf("policy members not last, as decimal strings: %s", p)
	}

	lr = sampleLaunch(NewSessionID())
	if env, err = SignLaunch(s, lr); err != nil {
		t.Fatal(err)
	}
	if p := payloadOf(t, env); bytes.Contains(p, []byte("max_upper")) || bytes.Contains(p, []byte("min_free")) {
		t.Errorf("zero limits written: %s", p)
	}
	if got, err = VerifyLaunch(env, s.Public()); err != nil || got.Policy.MaxUpper != 0 || got.Policy.MinFree != 0 {
		t.Errorf("record without limits: %v, %+v", err, got)
	}

	for _, bad := range []Policy{{MaxUpper: -1}, {MinFree: -1}} {
		lr := sampleLaunch(NewSessionID())
		lr.Policy.MaxUpper, lr.Policy.MinFree = bad.MaxUpper, bad.MinFree
		if _, err := SignLaunch(s, lr); err == nil {
			t.Errorf("%+v signed", bad)
		} else if errors.Is(err, ErrNotVerified) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}
