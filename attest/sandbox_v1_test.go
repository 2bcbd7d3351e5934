package attest

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestSandboxCgroupV1: where a limit was held by a cgroup v1 hierarchy
// survives signing and verifying as the sandbox's last member, is left out
// when none was, and is refused for a controller that is unknown or whose
// limit the record does not hold, or with a path that is not absolute.
func TestSandboxCgroupV1(t *testing.T) {
	s := testSigner(t, 1)
	lr := sampleLaunch(NewSessionID())
	lr.Sandbox.MemoryMax = 64 << 20
	lr.Sandbox.CgroupV1 = map[string]string{"pids": "/layerseal/0123", "memory": "/layerseal/0123"}
	env, err := SignLaunch(s, lr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyLaunch(env, s.Public())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Sandbox.CgroupV1, lr.Sandbox.CgroupV1) {
		t.Errorf("cgroup_v1 read back as %q", got.Sandbox.CgroupV1)
	}
	if p := payloadOf(t, env); !bytes.Contains(p, []byte(`"cgroup_v1":{"memory":"/layerseal/0123","pids":"/layerseal/0123"}},"policy"`)) {
		t.Errorf("cgroup_v1 is not the sandbox's last member, keys sorted: %s", p)
	}
	lr.Sandbox.CgroupV1 = nil
	if env, err = SignLaunch(s, lr); err != nil {
		t.Fatal(err)
	}
	if p := payloadOf(t, env); bytes.Contains(p, []byte("cgroup_v1")) {
		t.Errorf("a record with no v1 limit has a cgroup_v1 member: %s", p)
	}
	for _, bad := range []map[string]string{{"cpu": "/layerseal/0123"}, {"memory": "/layerseal/0123"}, {"pids": "layerseal/0123"}, {"pids": ""}, {"pids": "/a\nb"}} {
		lr := sampleLaunch(NewSessionID()) // pids max 512, no memory limit
		lr.Sandbox.CgroupV1 = bad
		if _, err := SignLaunch(s, lr); err == nil {
			t.Errorf("cgroup_v1 %q signed", bad)
		} else if errors.Is(err, ErrNotVerified) {
			t.Errorf("cgroup_v1 %q: %v", bad, err)
		}
	}
}
