package policy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layerseal/layerseal/attest"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		glob string
		yes  []attest.Path
		no   []attest.Path
	}{
		{".env", []attest.Path{".env"}, []attest.Path{"a/.env", ".env.local", ".", "env"}},
		{".env.*", []attest.Path{".env.local", ".env.x"}, []attest.Path{".env", "a/.env.local", ".env.a/b"}},
		{".github/workflows/**", []attest.Path{".github/workflows", ".github/workflows/ci.yml", ".github/workflows/a/b"}, []attest.Path{".github", ".github/x"}},
		{"**/.env", []attest.Path{".env", "a/.env", "a/b/.env"}, []attest.Path{"a/.env/x", "x.env"}},
		{"a/**/z", []attest.Path{"a/z", "a/b/z", "a/b/c/z"}, []attest.Path{"a", "z", "a/b"}},
		{"src/?.go", []attest.Path{"src/a.go"}, []attest.Path{"src/ab.go", "src/.go"}},
		{"[a-c]*", []attest.Path{"a", "bx", "c"}, []attest.Path{"d", "a/b"}},
		{"[^a-c]", []attest.Path{"d"}, []attest.Path{"a"}},
		{"x\\*", []attest.Path{"x*"}, []attest.Path{"xy"}},
		{".", []attest.Path{"."}, []attest.Path{"a"}},
		{"**", []attest.Path{".", "a", "a/b"}, nil},
		{"new\nline", []attest.Path{"new\nline"}, []attest.Path{"new"}},
	}
	for _, c := range cases {
		g, err := Compile(c.glob)
		if err != nil {
			t.Fatalf("Compile(%q): %v", c.glob, err)
		}
		for _, p := range c.yes {
			if !g.Match(p) {
				t.Errorf("%q should match %q", c.glob, p)
			}
			if !g.MayMatchWithin(p) {
				t.Errorf("%q: MayMatchWithin(%q) false for a match", c.glob, p)
			}
		}
		for _, p := range c.no {
			if g.Match(p) {
				t.Errorf("%q should not match %q", c.glob, p)
			}
		}
	}
}

func TestGlobNeverMatches(t *testing.T) {
	for _, bad := range []string{"", "/etc/passwd", "a//b", "a//", "./a", "a/../b", "a\x00b", "[z-a]", "[", "a**", "x/**y"} {
		if _, err := Compile(bad); err == nil {
			t.Errorf("Compile(%q) accepted a glob that can never match", bad)
		}
	}
}

func TestMayMatchWithin(t *testing.T) {
	g, _ := Compile(".github/workflows/**")
	for p, want := range map[attest.Path]bool{".": true, ".github": true, ".github/workflows": true, ".github/x": false, "src": false} {
		if got := g.MayMatchWithin(p); got != want {
			t.Errorf("MayMatchWithin(%q) = %t, want %t", p, got, want)
		}
	}
}

func rules(t *testing.T, exclude, protected, allow []string) *Rules {
	t.Helper()
	var r Rules
	var err error
	for _, x := range []struct {
		dst *[]*Glob
		src []string
	}{{&r.Exclude, exclude}, {&r.Protected, protected}, {&r.Allow, allow}} {
		if *x.dst, err = CompileAll(x.src); err != nil {
			t.Fatal(err)
		}
	}
	return &r
}

func TestRules(t *testing.T) {
	r := rules(t, []string{"node_modules", "vendor", "build/**"}, []string{".env", "src/*/.env", "vendor/keep/**"}, []string{"src/sub/.env"})
	for p, want := range map[attest.Path]bool{
		"node_modules": true, "node_modules/x": false, "vendor": false, "vendor/keep": false,
		"build": true, "build/a": true, ".": false, "src": false,
	} {
		// node_modules/x is not itself excluded: its parent is.
		if p == "node_modules/x" {
			continue
		}
		if got := r.Excluded(p); got != want {
			t.Errorf("Excluded(%q) = %t, want %t", p, got, want)
		}
	}
	if got := r.Violation(".env"); got != ".env" {
		t.Errorf("Violation(.env) = %q", got)
	}
	if got := r.Violation("src/a/.env"); got != "src/*/.env" {
		t.Errorf("Violation(a/.env) = %q", got)
	}
	if got := r.Violation("src/sub/.env"); got != "" {
		t.Errorf("Violation(sub/.env) = %q despite the allow", got)
	}
	if got := r.Violation("src/main.go"); got != "" {
		t.Errorf("Violation(src/main.go) = %q", got)
	}
	// A protected glob that may reach anywhere turns every exclusion off.
	everywhere := rules(t, []string{"node_modules"}, []string{"**/.env"}, nil)
	if everywhere.Excluded("node_modules") {
		t.Error("node_modules excluded although **/.env may match inside it")
	}
}

func TestUnusedAllows(t *testing.T) {
	// With the built-in globs, as every session has them: those of nested
	// repositories overlap src/** but do not count.
	r := rules(t, nil, append([]string{".env", "deploy/**", ".github/*/ci.yml"}, BuiltinGlobs()...), []string{"deploy/prod.yml", "src/**", ".env", "**/ci.yml", "docs/*.md"})
	var got []string
	for _, g := range r.UnusedAllows() {
		got = append(got, g.String())
	}
	if strings.Join(got, ",") != "src/**,docs/*.md" {
		t.Errorf("unused allows = %q, want src/** and docs/*.md", got)
	}
}

func TestParse(t *testing.T) {
	c, err := Parse("layerseal.yaml", []byte(`exclude: [.git/objects, node_modules, target]
protected: [.env, ".env.*", .github/workflows/**, deploy/**]
digest_cap: 256MiB
max_entries_per_dir: 10000
budget: {entries: 1000000, time: 10m}
checkpoint_every: 30s
apply: stage
log: /srv/layerseal-log
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Log != "/srv/layerseal-log" {
		t.Errorf("log: %q", c.Log)
	}
	if len(c.Exclude) != 3 || len(c.Protected) != 4 || c.DigestCap != 256<<20 || c.MaxEntriesPerDir != 10000 ||
		c.Entries != 1000000 || c.Time != 10*time.Minute || c.CheckpointEvery != 30*time.Second || c.Apply != ApplyStage || len(c.Digest) != 32 {
		t.Errorf("parsed %+v", c)
	}
	empty, err := Parse("e", nil)
	if err != nil || empty.Apply != ApplyAuto || len(empty.Digest) != 32 {
		t.Errorf("empty config: %+v, %v", empty, err)
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"exclude: [a]\nprotect: [.env]\n", "line 2"},
		{"exclude: [a]\nprotect: [.env]\n", "protect"},
		{"budget:\n  entries: 5\n  tim: 3s\n", "line 3"},
		{"protected: [/etc]\n", "line 1"},
		{"protected:\n  - ok\n  - a//b\n", "line 3"},
		{"digest_cap: lots\n", "line 1"},
		{"digest_cap: -5\n", "positive"},
		{"max_entries_per_dir: 0\n", "positive"},
		{"budget: {time: forever}\n", "duration"},
		{"apply: sometimes\n", "sometimes"},
		{"exclude: a\nexclude: b\n", "already defined"},
		{"exclude: [a\n", "line"},
		{"exclude: [a]\n---\nexclude: [b]\n", "more than one"},
		{"exclude: [{a: b}]\n", "glob string"},
		{"- a\n", "line 1"},
	}
	for _, c := range cases {
		_, err := Parse("layerseal.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}

// TestParseUserForms: the forms a user writes are read, or refused naming
// the line and the fix in the file's words, never a Go type.
func TestParseUserForms(t *testing.T) {
	c, err := Parse("layerseal.yaml", []byte("exclude: [node_modules/, target]\ndigest_cap: 1GB\napply: always\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DigestCap != 1e9 || c.Apply != ApplyAlways || len(c.Exclude) != 2 || !c.Exclude[0].Match("node_modules") || Texts(c.Exclude)[0] != "node_modules" {
		t.Errorf("parsed %+v", c)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"exclude: node_modules\n", "line 1: want a list of globs, such as [node_modules]"},
		{"exclude: [a]\nunknown_key: 1\n", `line 2: unknown key "unknown_key"`},
		{"\napply: maybe\n", `line 2: apply "maybe"`},
		{"budget:\n  entries: -5\n", `line 2: "-5": want a positive whole number`},
		{"max_entries_per_dir: -1\n", "line 1:"},
		{"protected: {a: b}\n", "line 1: want a list"},
		{"budget: 5\n", "line 1: budget takes a mapping"},
		{"budget: {entries: 5, tim: 3s}\n", `unknown key "tim" in budget`},
	} {
		_, err := Parse("layerseal.yaml", []byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "policy.") || strings.Contains(err.Error(), "int64") {
			t.Errorf("Parse(%q) = %v, want an error with %q and no Go type", bad.yaml, err, bad.want)
		}
	}
}

// TestBuiltin checks the paths every session protects: what git runs or
// hides when the operator reviews the workspace, at the root and in any
// repository beneath, and that only the anchored ones keep an exclusion
// from summarizing them.
func TestBuiltin(t *testing.T) {
	gs, err := CompileAll(BuiltinGlobs())
	if err != nil {
		t.Fatal(err)
	}
	r := Rules{Protected: gs}
	for _, p := range []attest.Path{"layerseal.yaml", ".git/config", ".git/hooks/pre-commit", ".git/commondir",
		".git/info/exclude", ".git/modules/sub/config", ".gitmodules", ".vscode/settings.json", ".idea/workspace.xml",
		"sub/.git/config", "a/b/.git/hooks/post-checkout", "sub/.git/commondir",
		".git/rebase-merge/git-rebase-todo", ".git/rebase-apply/patch", ".git/sequencer/todo", ".git/config.worktree",
		".husky/pre-commit", ".husky/_/h", ".githooks/pre-push", ".pre-commit-config.yaml", "lefthook.yml",
		".lefthook.toml", "lefthook-local.yml", ".config/lefthook.yaml", ".lefthook/pre-commit/x.sh", "hk.pkl",
		".claude/settings.json", ".claude/settings.local.json", ".mcp.json", ".cursor/mcp.json", ".gemini/settings.json",
		".codex/config.toml", ".kiro/hooks/a.kiro.hook", ".zed/settings.json", ".helix/languages.toml", ".nvim.lua",
		".exrc", ".envrc", "mise.toml", "mise.local.toml", ".mise.toml", ".devcontainer/devcontainer.json",
		".devcontainer.json"} {
		if r.Violation(p) == "" {
			t.Errorf("%s is not protected", p)
		}
	}
	for _, p := range []attest.Path{".git/HEAD", ".git/index", ".git/objects/ab/cdef", ".git/refs/heads/main",
		"src/main.go", "config", "sub/.git/HEAD", ".github/workflows/ci.yml",
		// Instructions only: prompt text, shown by diff.
		"CLAUDE.md", "AGENTS.md", ".cursorrules", "src/.claude", "sub/.envrc", "lefthook", ".git/MERGE_MSG"} {
		if rule := r.Violation(p); rule != "" {
			t.Errorf("%s is protected by %q", p, rule)
		}
	}
	if v := r.Violation("sub/.git/config"); v != "**/.git/config" {
		t.Errorf("sub/.git/config: rule %q", v)
	}
	// A .git that is or becomes a file or symlink points git elsewhere; a
	// .git directory whose mtime moved does not.
	dir, file, link := &attest.State{Type: attest.Dir}, &attest.State{Type: attest.File}, &attest.State{Type: attest.Symlink}
	for _, c := range []struct {
		p        attest.Path
		old, new *attest.State
		want     string
	}{
		{".git", dir, dir, ""}, {".git", nil, dir, ""}, {".git", dir, nil, ""}, {"sub/.git", dir, dir, ""},
		{".git", file, file, "**/.git"}, {".git", dir, file, "**/.git"}, {".git", nil, link, "**/.git"},
		{"sub/.git", file, dir, "**/.git"}, {"sub/.git", file, nil, "**/.git"},
		{"src", file, file, ""}, {".git/config", file, file, ".git/config"},
	} {
		if got := r.ChangeViolation(c.p, c.old, c.new); got != c.want {
			t.Errorf("ChangeViolation(%s, %v, %v) = %q, want %q", c.p, c.old, c.new, got, c.want)
		}
	}
	r.Exclude, _ = CompileAll([]string{"node_modules", ".git", ".git/objects"})
	for p, want := range map[attest.Path]bool{"node_modules": true, ".git/objects": true, ".git": false} {
		if got := r.Excluded(p); got != want {
			t.Errorf("Excluded(%s) = %t, want %t", p, got, want)
		}
	}
}

// TestBuiltinTable: every row of the table is a glob that compiles or a
// named rule, with a tool and a reason, none twice; the copy returned is
// the caller's.
func TestBuiltinTable(t *testing.T) {
	seen := map[string]bool{}
	named := 0
	for _, r := range Builtin() {
		if r.Tool == "" || r.Reason == "" || strings.Contains(r.Reason, "\n") {
			t.Errorf("row %q: tool %q, reason %q", r.Rule, r.Tool, r.Reason)
		}
		if seen[r.Rule] {
			t.Errorf("row %q twice", r.Rule)
		}
		seen[r.Rule] = true
		if r.Named() {
			named++
			if !strings.HasSuffix(r.Rule, ")") {
				t.Errorf("named rule %q", r.Rule)
			}
		} else if _, err := Compile(r.Rule); err != nil {
			t.Errorf("row %q: %v", r.Rule, err)
		}
	}
	// Every named rule the package declares has its row: a const whose
	// value is in parentheses, found in the package's own sources.
	fset := token.NewFileSet()
	sources, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := 0
	for _, name := range sources {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			v, ok := n.(*ast.ValueSpec)
			if !ok || len(v.Values) != 1 || !strings.HasPrefix(v.Names[0].Name, "Rule") {
				return true
			}
			lit, ok := v.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			if strings.HasPrefix(name, "(") {
				consts++
				if !seen[name] {
					t.Errorf("named rule %s = %q has no row in the table", v.Names[0].Name, name)
				}
			}
			return true
		})
	}
	if consts != named {
		t.Errorf("%d named rules declared, %d rows", consts, named)
	}
	if g := BuiltinGlobs(); len(g)+named != len(Builtin()) || g[0] != FileName {
		t.Errorf("BuiltinGlobs() = %q", g)
	}
	b := Builtin()
	b[0].Rule = "x"
	if Builtin()[0].Rule != FileName {
		t.Error("Builtin() returns the table itself")
	}
}

// TestGrants: a change whose new state would grant rights on the host
// breaks a built-in rule wherever it lies, unless an allow covers it.
func TestGrants(t *testing.T) {
	r := rules(t, nil, nil, []string{"tools/**"})
	file := func(mode uint32, xs ...attest.Xattr) *attest.State {
		return &attest.State{Type: attest.File, Mode: mode, Xattrs: xs}
	}
	capability := attest.Xattr{Name: "security.capability", Value: []byte{1}}
	for _, c := range []struct {
		p        attest.Path
		old, new *attest.State
		want     string
	}{
		{"sh", nil, file(0o4755), RuleSetuid},
		{"sh", file(0o4755), file(0o4755), RuleSetuid}, // new contents, or a new owner, in a setuid file
		{"tool", file(0o755), file(0o2755), RuleSetgid},
		{"ping", nil, file(0o755, capability), RuleCapabilities},
		{"mem", nil, &attest.State{Type: attest.CharDev, Mode: 0o666}, RuleDevice},
		{"disk", nil, &attest.State{Type: attest.BlockDev, Mode: 0o600}, RuleDevice},
		{"shared", nil, &attest.State{Type: attest.Dir, Mode: 0o2775}, ""}, // a setgid directory runs nothing
		{"sh", file(0o4755), file(0o755), ""},
		{"sh", file(0o4755), nil, ""},
		{"plain", nil, file(0o755, attest.Xattr{Name: "user.note", Value: []byte("x")}), ""},
		{"tools/sh", nil, file(0o4755), ""},
	} {
		if got := r.ChangeViolation(c.p, c.old, c.new); got != c.want {
			t.Errorf("ChangeViolation(%s, %+v, %+v) = %q, want %q", c.p, c.old, c.new, got, c.want)
		}
	}
}
