package layerseal

import (
	"errors"
	"os"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestAgentMayWrite: the agent's user may create entries in the workspace
// directory as its owner, through its group or any other's bits; root
// always may.
func TestAgentMayWrite(t *testing.T) {
	ws := t.TempDir()
	owner, group := uint32(os.Getuid()), uint32(os.Getgid())
	other := owner + 1000
	for _, c := range []struct {
		mode os.FileMode
		u    specs.User
		ok   bool
	}{
		{0o755, specs.User{UID: 0, GID: 0}, true},
		{0o755, specs.User{UID: other, GID: other}, false},
		{0o775, specs.User{UID: other, GID: group}, true},
		{0o775, specs.User{UID: other, GID: other, AdditionalGids: []uint32{group}}, true},
		{0o775, specs.User{UID: other, GID: other}, false},
		{0o777, specs.User{UID: other, GID: other}, true},
		{0o773, specs.User{UID: other, GID: other}, true},
		{0o776, specs.User{UID: other, GID: other}, false}, // no search
	} {
		if err := os.Chmod(ws, c.mode); err != nil {
			t.Fatal(err)
		}
		err := AgentMayWrite(ws, c.u)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrAgentCannotWrite) {
			t.Errorf("mode %04o, uid %d gid %d %v: %v, want ok %t", c.mode, c.u.UID, c.u.GID, c.u.AdditionalGids, err, c.ok)
		}
	}
	if owner != 0 {
		os.Chmod(ws, 0o300)
		if err := AgentMayWrite(ws, specs.User{UID: owner, GID: other}); err != nil {
			t.Errorf("the owner, mode 0300: %v", err)
		}
	}
}
