package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/posixacl"
	"github.com/layerseal/layerseal/internal/privtest"
	"github.com/layerseal/layerseal/policy"
)

// statementAt reads the statement a run wrote to out.
func statementAt(t *testing.T, out string) *attest.Statement {
	t.Helper()
	env, err := os.ReadFile(filepath.Join(out, "statement.json"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := attest.ReadStatement(env)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGrantsWrite: a root agent gives write access to other users in
// every way the kernel offers (mode bits, owner, access and default
// ACLs), in the workspace and inside an excluded subtree. Each is a
// (grants write) violation, reverted, and the rest of the run is applied;
// ordinary work (a root agent in a root-owned workspace, an unprivileged
// agent in its own umask 002 repository) stays clean.
func TestGrantsWrite(t *testing.T) {
	e := newEnv(t)
	write(t, e.ws, map[string]string{".git/config": "[core]\n", "deploy/prod.sh": "#!/bin/sh\n", "src/a": "a\n",
		"node_modules/pkg/index.js": "x\n", "layerseal.yaml": "exclude: [node_modules]\n"})
	if err := os.Chmod(filepath.Join(e.ws, "deploy/prod.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, `chmod 0777 .git; chmod 0775 .
chmod 0666 deploy/prod.sh
chown 65534 deploy
echo x > mine; chown 1000 mine
echo y > acl; setfacl -m u:1000:rwx acl
mkdir inherit; setfacl -d -m u:1000:rwx inherit
echo b > src/a
mkdir -p node_modules/lib; echo a > node_modules/lib/a.js
echo h > node_modules/pkg/hook.js; chmod 0666 node_modules/pkg/hook.js
setfacl -m u:1000:rwx node_modules/pkg/index.js`)
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged:\n%s", code, log)
	}
	attacks := []string{".", ".git", "acl", "deploy", "deploy/prod.sh", "inherit", "mine", "node_modules/pkg/hook.js", "node_modules/pkg/index.js"}
	st1 := statementAt(t, out)
	got := map[string]string{}
	for _, v := range st1.Violations {
		got[string(v.Path)] = v.Rule + " " + string(v.Action)
	}
	// The reader records ACLs as xattrs: the rule reads them there.
	for _, en := range st1.Entries {
		if en.Path == "acl" && (en.New == nil || !slices.ContainsFunc(en.New.Xattrs, func(x attest.Xattr) bool { return x.Name == posixacl.AccessXattr })) {
			t.Errorf("acl: no %s in the statement: %+v", posixacl.AccessXattr, en.New)
		}
	}
	for _, p := range attacks {
		if want := policy.RuleGrantsWrite + " " + string(attest.Reverted); got[p] != want {
			t.Errorf("violation at %q: %q, want %q", p, got[p], want)
		}
		delete(got, p)
	}
	if len(got) > 0 {
		t.Errorf("other violations: %v", got)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	for p, want := range map[string]os.FileMode{".": os.ModeDir | 0o755, ".git": os.ModeDir | 0o755, "deploy/prod.sh": 0o755} {
		if fi, err := os.Lstat(filepath.Join(e.ws, p)); err != nil || fi.Mode() != want {
			t.Errorf("%s: %v, %v: want mode %v", p, fi, err, want)
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(e.ws, "deploy"), &st); err != nil || st.Uid != 0 {
		t.Errorf("deploy: owner %d, %v: want 0", st.Uid, err)
	}
	for _, p := range []string{"mine", "acl", "inherit", "node_modules/pkg/hook.js"} {
		if _, err := os.Lstat(filepath.Join(e.ws, p)); err == nil {
			t.Errorf("%s was applied", p)
		}
	}
	if _, err := unix.Getxattr(filepath.Join(e.ws, "node_modules/pkg/index.js"), posixacl.AccessXattr, nil); !errors.Is(err, unix.ENODATA) {
		t.Errorf("node_modules/pkg/index.js: its ACL was applied (%v)", err)
	}
	if readString(t, filepath.Join(e.ws, "src/a")) != "b\n" || readString(t, filepath.Join(e.ws, "node_modules/lib/a.js")) != "a\n" {
		t.Error("the rest of the change set was not applied")
	}

	// A root agent's ordinary work in its root-owned workspace.
	out = filepath.Join(e.dir, "run2")
	code, log = e.run(out, `mkdir -p lib/x; echo 1 > lib/x/f; echo c > src/a; chmod 0700 deploy/prod.sh
mkdir -p node_modules/dep; echo d > node_modules/dep/i.js; cp -a lib lib2`)
	if code != 0 || strings.Contains(log, "protected path") || len(statementAt(t, out).Violations) > 0 {
		t.Errorf("root agent's ordinary work: exit %d:\n%s", code, log)
	}
	if readString(t, filepath.Join(e.ws, "lib/x/f")) != "1\n" {
		t.Error("root agent's ordinary work was not applied")
	}

	// An agent as the workspace's owner in a umask 002 repository whose
	// group writes its directories.
	e = newEnv(t)
	write(t, e.ws, map[string]string{"README.md": "r\n", "src/main.go": "package main\n", "other": "o\n",
		"node_modules/pkg/index.js": "x\n", "layerseal.yaml": "exclude: [node_modules]\n"})
	privtest.Searchable(t, e.dir)
	err := filepath.Walk(e.ws, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o664)
		if fi.IsDir() {
			mode = 0o775
		}
		return errors.Join(os.Lchown(p, 1000, 1000), os.Chmod(p, mode))
	})
	if err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(e.dir, "run")
	code, log = e.run(out, `umask 002; echo n > new; mkdir d; echo f > d/f; echo m >> README.md; chmod 0664 other
chmod 0775 src; mkdir -p node_modules/dep/lib; echo d > node_modules/dep/lib/i.js`, "--user", "1000:1000")
	st2 := statementAt(t, out)
	if code != 0 || strings.Contains(log, "protected path") || len(st2.Violations) > 0 {
		t.Errorf("umask 002 repository: exit %d:\n%s", code, log)
	}
	for _, en := range st2.Entries {
		if attest.Within(en.Path, "node_modules") {
			t.Errorf("%q in the excluded subtree was itemized", en.Path)
		}
	}
	if fi, err := os.Stat(filepath.Join(e.ws, "d/f")); err != nil || fi.Mode() != 0o664 {
		t.Errorf("d/f: %v, %v: want it applied, 0664", fi, err)
	}
}
