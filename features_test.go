package layerseal

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/probe"
)

// TestLaunchRecordIgnoresBadFeatureCache plants in the state dir a kernel
// feature cache whose userxattr finding is the opposite of the kernel's, stale or
// not root's 0600 in turn: the launch record must say what a fresh probe
// finds. The control plants the same finding under the current key, root's
// and 0600, and sees it used, so the test sees which cache a session read.
func TestLaunchRecordIgnoresBadFeatureCache(t *testing.T) {
	privtest.Require(t)
	fresh, err := probe.Detect()
	if err != nil {
		t.Fatal(err)
	}
	want := kernelFeatures(fresh)
	state := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cachePath := filepath.Join(state, probe.CacheFile)
	if got := launchKernel(t, state); !reflect.DeepEqual(got, want) {
		t.Fatalf("no cache: launch record says %+v, a fresh probe %+v", got, want)
	}
	own, err := os.ReadFile(cachePath)
	if err != nil {
		t.Fatalf("the first session wrote no cache: %v", err)
	}
	// The forged cache turns the userxattr finding round (it is no before
	// Linux 5.11).
	says, turned := []byte(`"userxattr":{"status":"yes"`), []byte(`"userxattr":{"status":"no"`)
	if !fresh.UserXattr.OK() {
		says, turned = turned, says
	}
	if bytes.Count(own, says) != 1 {
		t.Fatalf("cache %s: want one userxattr finding of %s", own, says)
	}
	forged := bytes.Replace(own, says, turned, 1)
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		data  []byte
		perm  os.FileMode
		owner int
		used  bool
	}{
		{"valid (control: used)", forged, 0o600, 0, true},
		{"other boot id", bytes.Replace(forged, bytes.TrimSpace(bootID), []byte("00000000-0000-4000-8000-000000000000"), 1), 0o600, 0, false},
		{"mode 0644", forged, 0o644, 0, false},
		{"not root's", forged, 0o600, 65534, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(cachePath, c.data, c.perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(cachePath, c.perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(cachePath, c.owner, c.owner); err != nil {
				t.Fatal(err)
			}
			got := launchKernel(t, state)
			if c.used {
				if got.Features["userxattr"] == want.Features["userxattr"] {
					t.Fatalf("a valid cache under the current key was not used: %+v", got)
				}
				return
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("launch record says %+v, a fresh probe %+v", got, want)
			}
			if now, err := os.ReadFile(cachePath); err != nil || !bytes.Equal(now, own) {
				t.Errorf("cache not rewritten: %v\n%s\nwant\n%s", err, now, own)
			}
		})
	}
}

// launchKernel runs a session that changes nothing with the state dir
// state and returns what its launch record says about the kernel.
func launchKernel(t *testing.T, state string) attest.Kernel {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(nil)
	key, err := attest.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Run(RunConfig{Workspace: t.TempDir(), Key: key, Out: out, StateDir: state,
		Process: DefaultProcess([]string{"true"}, 0, 0, "host"),
		Sandbox: nsrun.Sandbox{Network: "host", Seccomp: "unconfined"}}); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(out, LaunchFile))
	if err != nil {
		t.Fatal(err)
	}
	l, err := attest.VerifyLaunch(env, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return l.Kernel
}
