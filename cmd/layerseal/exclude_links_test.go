package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/layerseal/layerseal/internal/privtest"
)

// TestHostileExcludedSymlinkChain: in an excluded node_modules the agent
// makes `t -> .` and `x -> t/t/t/../../../etc`, which a lexical cleaning
// keeps inside the subtree and the kernel resolves above the workspace;
// also a link out to the workspace's src through the same chain, and one
// through a directory and a symlink only the lower layer holds. Each is
// itemized in the statement, not counted; an npm-like tree of links
// (.bin, a nested node_modules) stays counted.
func TestHostileExcludedSymlinkChain(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	write(t, e.ws, map[string]string{"layerseal.yaml": "exclude: [node_modules]\n", "src/a": "a\n",
		"node_modules/lib/index.js": "x\n"})
	if err := os.Symlink("../..", filepath.Join(e.ws, "node_modules/lib/root")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `cd node_modules; ln -s . t; ln -s t/t/t/../../../etc x; ln -s t/t/../src y; ln -s lib/root/src z
mkdir -p .bin pkg/bin pkg/node_modules dep; echo c > pkg/bin/cli.js; ln -s ../pkg/bin/cli.js .bin/cli
ln -s ../../dep pkg/node_modules/dep; ln -s lib/../lib/index.js main`)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, log)
	}
	st := (&applyCase{e: e, out: out, log: log}).statement(t)
	var got []string
	for _, en := range st.Entries {
		got = append(got, string(en.Path))
	}
	if want := []string{"node_modules/x", "node_modules/y", "node_modules/z"}; !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	// node_modules, t, .bin, .bin/cli, pkg, pkg/bin, pkg/bin/cli.js,
	// pkg/node_modules, pkg/node_modules/dep, dep, main.
	if len(st.Excluded) != 1 || st.Excluded[0].Entries != 11 {
		t.Errorf("excluded %+v, want node_modules with 11 entries", st.Excluded)
	}
	// Applied (no violation: a symlink's target is the reviewer's to
	// judge), the workspace verifies against the statement, counts too.
	if target, err := os.Readlink(filepath.Join(e.ws, "node_modules/x")); err != nil || target != "t/t/t/../../../etc" {
		t.Errorf("node_modules/x in the workspace: %q, %v\n%s", target, err, log)
	}
	if code, so, se := e.cli("verify", "--key", e.pub, "--workspace", e.ws, filepath.Join(out, "statement.json")); code != 0 {
		t.Errorf("verify --workspace: exit %d\n%s%s", code, so, se)
	}
}
