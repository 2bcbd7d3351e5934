package layerseal

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/policy"
)

func TestMain(m *testing.M) {
	nsrun.Init() // a session's init is this test binary, re-executed
	os.Exit(m.Run())
}

// upperReads counts the reads of upper layers while it runs f.
func upperReads(t *testing.T, f func()) int64 {
	t.Helper()
	var n atomic.Int64
	onRead = func() { n.Add(1) }
	defer func() { onRead = nil }()
	f()
	return n.Load()
}

// runAgent runs script as a root agent over ws under p.
func runAgent(t *testing.T, ws, state string, p attest.Policy, script string) *RunResult {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(nil)
	key, err := attest.NewSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(RunConfig{Workspace: ws, Key: key, Out: filepath.Join(t.TempDir(), "out"), StateDir: state,
		Process: DefaultProcess([]string{"/bin/sh", "-ec", script}, 0, 0, "host"), Policy: p,
		Sandbox: nsrun.Sandbox{Network: "host", Seccomp: "unconfined"}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunReadsUpperOnce: after a run the upper layer is read once for the
// statement, and at most once more: for the sweep's re-check, which also
// lists the excluded subtrees the apply needs, or, without violations,
// for those subtrees alone. A later apply reads it twice: the signed
// counts of the excluded subtrees are checked, then their entries read.
func TestRunReadsUpperOnce(t *testing.T) {
	privtest.Require(t)
	for _, c := range []struct {
		name   string
		policy attest.Policy
		script string
		want   int64
		// applied and absent are workspace files after the run
		applied, absent []string
	}{
		{"plain", attest.Policy{}, "echo a > a", 1, []string{"a"}, nil},
		{"excluded", attest.Policy{Exclude: []attest.Path{"cache"}}, "mkdir cache; echo c > cache/c; echo a > a", 2, []string{"a", "cache/c"}, nil},
		{"violation", attest.Policy{Protect: []attest.Path{"secret"}, Apply: policy.ApplyAlways}, "echo s > secret; echo a > a", 2, []string{"a"}, []string{"secret"}},
		{"violation and excluded", attest.Policy{Exclude: []attest.Path{"cache"}, Protect: []attest.Path{"secret"}, Apply: policy.ApplyAlways},
			"mkdir cache; echo c > cache/c; echo s > secret; echo a > a", 2, []string{"a", "cache/c"}, []string{"secret"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			var res *RunResult
			n := upperReads(t, func() { res = runAgent(t, ws, filepath.Join(t.TempDir(), "state"), c.policy, c.script) })
			if !res.Applied {
				t.Fatalf("not applied: %+v", res.Statement)
			}
			if n != c.want {
				t.Errorf("the upper layer was read %d time(s), want %d", n, c.want)
			}
			for _, f := range c.applied {
				if _, err := os.Lstat(filepath.Join(ws, f)); err != nil {
					t.Errorf("%s was not applied: %v", f, err)
				}
			}
			for _, f := range c.absent {
				if _, err := os.Lstat(filepath.Join(ws, f)); err == nil {
					t.Errorf("%s was applied", f)
				}
			}
		})
	}

	t.Run("later apply", func(t *testing.T) {
		ws, state := t.TempDir(), filepath.Join(t.TempDir(), "state")
		p := attest.Policy{Exclude: []attest.Path{"cache"}, Apply: policy.ApplyStage}
		var res *RunResult
		if n := upperReads(t, func() { res = runAgent(t, ws, state, p, "mkdir cache; echo c > cache/c") }); n != 1 {
			t.Errorf("a staged run read the upper layer %d time(s), want 1", n)
		}
		var err error
		planned := -1
		n := upperReads(t, func() {
			_, err = OpenStore(state).Apply(res.Statement.SessionID, ApplyOptions{Planned: func(n int) { planned = n }})
		})
		if err != nil {
			t.Fatal(err)
		}
		if planned < 1 {
			t.Errorf("apply planned %d change(s), want the count before its first step", planned)
		}
		if n != 2 {
			t.Errorf("apply read the upper layer %d time(s), want 2", n)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "cache/c")); err != nil || string(b) != "c\n" {
			t.Errorf("cache/c: %q, %v", b, err)
		}
	})
}

// TestRunEmptyApply: a run that changed nothing is applied with nothing
// but the journal that says so (written with the statement): no plan of
// an apply in progress, and the upper layer is dropped. A second apply is
// refused as already applied.
func TestRunEmptyApply(t *testing.T) {
	privtest.Require(t)
	ws, state := t.TempDir(), filepath.Join(t.TempDir(), "state")
	res := runAgent(t, ws, state, attest.Policy{}, "test -d .")
	if !res.Applied || len(res.Statement.Entries) != 0 {
		t.Fatalf("applied %v with %d entries, want an applied empty change set", res.Applied, len(res.Statement.Entries))
	}
	dir := OpenStore(state).session(res.Statement.SessionID)
	j, err := dir.readJournal()
	if err != nil || j == nil || j.State != journalApplied {
		t.Fatalf("journal %+v, %v; want applied", j, err)
	}
	for _, p := range []string{filepath.Join(string(dir), planFile), dir.upper(), dir.work()} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want none after an empty change set was applied", p, err)
		}
	}
	if _, err := OpenStore(state).Apply(res.Statement.SessionID, ApplyOptions{}); !errors.Is(err, ErrAlreadyApplied) {
		t.Errorf("second apply: %v, want ErrAlreadyApplied", err)
	}
}
