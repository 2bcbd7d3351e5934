package attest

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
)

// TestLaunchEnvNotRecorded: the names whose values a launch record leaves
// out survive signing and verifying and follow every other member; a
// record without any leaves the member out; names that are out of order,
// repeated, empty, hold "=" or stand beside an agent.env entry of the same
// name are refused when signing.
func TestLaunchEnvNotRecorded(t *testing.T) {
	s := testSigner(t, 1)
	lr := sampleLaunch(NewSessionID())
	lr.EnvNotRecorded = []string{"ANTHROPIC_API_KEY", "GITHUB_TOKEN"}
	env, err := SignLaunch(s, lr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyLaunch(env, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.EnvNotRecorded, lr.EnvNotRecorded) {
		t.Errorf("env_not_recorded read back as %q", got.EnvNotRecorded)
	}
	if p := payloadOf(t, env); !bytes.Contains(p, []byte(`,"env_not_recorded":["ANTHROPIC_API_KEY","GITHUB_TOKEN"]}`)) {
		t.Errorf("env_not_recorded is not the predicate's last member: %s", p)
	}
	lr.EnvNotRecorded = nil
	if env, err = SignLaunch(s, lr); err != nil {
		t.Fatal(err)
	}
	if p := payloadOf(t, env); bytes.Contains(p, []byte("env_not_recorded")) {
		t.Errorf("a record with every value has an env_not_recorded member: %s", p)
	}
	for _, bad := range [][]string{{"B", "A"}, {"A", "A"}, {""}, {"A=1"}, {"A\n"}, {"HOME"}} {
		lr := sampleLaunch(NewSessionID())
		lr.EnvNotRecorded = bad
		if _, err := SignLaunch(s, lr); err == nil {
			t.Errorf("env_not_recorded %q signed", bad)
		} else if errors.Is(err, ErrNotVerified) {
			t.Errorf("env_not_recorded %q: %v", bad, err)
		}
	}
}

// TestLaunchRecordBeforeEnvNotRecorded: a launch record made by a real
// run before env_not_recorded existed (with --env FOO=bar --env
// GITHUB_TOKEN=s3cr3t, both in agent.env) still verifies, reads back with
// no names left out, and encodes to the same payload.
func TestLaunchRecordBeforeEnvNotRecorded(t *testing.T) {
	env, err := os.ReadFile("testdata/launch-before-env-not-recorded.json")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := LoadPublicKey("testdata/launch-before-env-not-recorded.pub")
	if err != nil {
		t.Fatal(err)
	}
	lr, err := VerifyLaunch(env, pub)
	if err != nil {
		t.Fatalf("old launch record: %v", err)
	}
	if lr.EnvNotRecorded != nil || len(lr.Agent.Env) != 5 || lr.Agent.Env[4] != "GITHUB_TOKEN=s3cr3t" {
		t.Errorf("old launch record reads as env %q, not recorded %q", lr.Agent.Env, lr.EnvNotRecorded)
	}
	// Signed anew (by this run's test key), its predicate is the same
	// bytes but for the key ID.
	keyID := lr.KeyID
	again, err := SignLaunch(testSigner(t, 1), lr)
	if err != nil {
		t.Fatal(err)
	}
	predicate := func(p []byte) []byte { return p[bytes.Index(p, []byte(`"predicate":`)):] }
	p, q := predicate(payloadOf(t, env)), predicate(payloadOf(t, again))
	q = bytes.Replace(q, []byte(lr.KeyID), []byte(keyID), 1)
	if !bytes.Equal(q, p) {
		t.Errorf("old launch record encodes anew as\n%s\nnot\n%s", q, p)
	}
}
