package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/treediff"
	"github.com/layerseal/layerseal/policy"
)

// operatorGit runs git in dir for the operator, with home as HOME and no system
// config, and returns its output.
func operatorGit(t *testing.T, dir, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// gitRepo makes e's workspace a repository with one commit of files (a
// script, "#!...", executable), as the operator has it before the run.
func gitRepo(t *testing.T, e *env, home string, files map[string]string) {
	t.Helper()
	write(t, e.ws, files)
	for p, content := range files {
		if strings.HasPrefix(content, "#!") {
			os.Chmod(filepath.Join(e.ws, p), 0o755)
		}
	}
	operatorGit(t, e.ws, home, "init", "-q", "-b", "main")
	operatorGit(t, e.ws, home, "config", "user.name", "op")
	operatorGit(t, e.ws, home, "config", "user.email", "op@example.com")
	operatorGit(t, e.ws, home, "add", "-A")
	operatorGit(t, e.ws, home, "commit", "-qm", "base")
}

// TestReviewToolsProtected: what the operator's git, hook managers,
// editors and coding agents run from the workspace. With core.hooksPath
// .husky set in the repository before the run, the agent rewrites a hook
// there, writes agents' and direnv's settings and a pre-commit config, and
// leaves an interactive rebase stopped before an exec line: each is a
// violation, reverted, and the operator's git commit and git rebase
// --continue after apply run none of it, while the agent's own commit and
// edit are applied.
func TestReviewToolsProtected(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(e.dir, "home")
	os.MkdirAll(home, 0o755)
	mark := filepath.Join(e.dir, "owned")
	gitRepo(t, e, home, map[string]string{"README.md": "readme\n", ".husky/pre-commit": "#!/bin/sh\nexit 0\n"})
	operatorGit(t, e.ws, home, "config", "core.hooksPath", ".husky")
	before := e.manifest()

	script := `export HOME=/tmp GIT_CONFIG_NOSYSTEM=1
echo agent > work.txt; git add work.txt; git commit -qm agent
printf '#!/bin/sh\nprintf "break\\nexec touch %s\\n" >> "$1"\n' ` + mark + `-rebase > /tmp/todo; chmod +x /tmp/todo
GIT_SEQUENCE_EDITOR=/tmp/todo git rebase -q -i HEAD~1
printf '#!/bin/sh\ntouch ` + mark + `-hook\n' > .husky/pre-commit
mkdir .claude; echo '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch ` + mark + `"}]}]}}' > .claude/settings.json
echo '{"mcpServers":{"x":{"command":"touch","args":["` + mark + `"]}}}' > .mcp.json
echo 'touch ` + mark + `' > .envrc
printf 'repos:\n- repo: local\n  hooks:\n  - {id: x, name: x, entry: touch ` + mark + `, language: system}\n' > .pre-commit-config.yaml
echo edited >> README.md`
	out := filepath.Join(e.dir, "run")
	code, log := e.run(out, script)
	if code != 0 || !strings.Contains(log, "protected path(s): the change set is staged") {
		t.Fatalf("run: exit %d, not staged for its violations:\n%s", code, log)
	}
	for _, v := range [][2]string{{".husky/pre-commit", ".husky/**"}, {".claude/settings.json", ".claude/**"},
		{".mcp.json", ".mcp.json"}, {".envrc", ".envrc"}, {".pre-commit-config.yaml", ".pre-commit-config.yaml"},
		{".git/rebase-merge", ".git/rebase-merge/**"}} {
		if want := "protected path " + v[0] + " changed (rule \"" + v[1] + "\"): reverted"; !strings.Contains(log, want) {
			t.Errorf("no %q in:\n%s", want, log)
		}
	}
	// The stopped rebase is one line, the directory the agent made, with
	// a count of what lies beneath; show --all lists the todo list too.
	if !strings.Contains(log, "violation(s) beneath it (`layerseal show --all` lists them)") {
		t.Errorf("the violations beneath .git/rebase-merge are not counted on its line:\n%s", log)
	}
	if all := e.mustCLI(0, "show", "--all", filepath.Join(out, "statement.json")); !strings.Contains(all, "violation: .git/rebase-merge/git-rebase-todo (rule \".git/rebase-merge/**\"): reverted\n") {
		t.Errorf("show --all does not list the todo list's violation:\n%s", all)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	after := e.manifest()
	if d := treediff.Equal(treediff.Manifest{".husky": before[".husky"], ".husky/pre-commit": before[".husky/pre-commit"]},
		treediff.Manifest{".husky": after[".husky"], ".husky/pre-commit": after[".husky/pre-commit"]}); d != "" {
		t.Errorf("the hook changed: %s", d)
	}
	for _, p := range []string{".claude", ".mcp.json", ".envrc", ".pre-commit-config.yaml", ".git/rebase-merge"} {
		if _, ok := after[p]; ok {
			t.Errorf("%s was applied", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.ws, "README.md")); string(b) != "readme\nedited\n" {
		t.Errorf("README.md = %q: the agent's edit was not applied", b)
	}
	if log := operatorGit(t, e.ws, home, "log", "--format=%s"); log != "agent\nbase\n" {
		t.Errorf("the agent's commit was not applied: git log:\n%s", log)
	}
	// The operator reviews, commits, and continues the rebase git status
	// would report: nothing the agent left runs.
	if st := operatorGit(t, e.ws, home, "status"); strings.Contains(st, "rebase") {
		t.Errorf("git status reports a rebase:\n%s", st)
	}
	operatorGit(t, e.ws, home, "commit", "-q", "-a", "--allow-empty", "-m", "review")
	cont := exec.Command("git", "-C", e.ws, "rebase", "--continue")
	cont.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_EDITOR=true")
	cont.Run() // no rebase in progress: it fails
	for _, m := range []string{"-hook", "-rebase"} {
		if _, err := os.Stat(mark + m); err == nil {
			t.Errorf("the operator's git ran the agent's command (%s)", m[1:])
		}
	}
}

// TestGlobalHooksPathProtected: a core.hooksPath set in the launching
// user's global config ($HOME/.gitconfig) and naming a directory of the
// workspace is read at launch: the agent's hook there is a violation,
// reverted, and the directory is in the launch record's policy; --allow
// lets a hook there through.
func TestGlobalHooksPathProtected(t *testing.T) {
	e := newEnv(t)
	home := filepath.Join(e.dir, "home")
	write(t, home, map[string]string{".gitconfig": "[core]\n\thooksPath = tools/hooks\n"})
	mark := filepath.Join(e.dir, "owned")
	gitRepo(t, e, home, map[string]string{"README.md": "readme\n", "tools/build.sh": "true\n"})
	out := filepath.Join(e.dir, "run")
	args := []string{"run", "--workspace", e.ws, "--key", e.key, "--out", out, "--state-dir", e.state, "--",
		"/bin/sh", "-ec", "mkdir tools/hooks; printf '#!/bin/sh\\ntouch " + mark + "\\n' > tools/hooks/pre-commit; chmod +x tools/hooks/pre-commit; echo x >> tools/build.sh"}
	code, stdout, stderr := e.cliEnv([]string{"HOME=" + home, "XDG_CONFIG_HOME="}, args...)
	if want := `protected path tools/hooks/pre-commit changed (rule "tools/hooks/**"): reverted`; code != 0 || !strings.Contains(stderr, want) {
		t.Fatalf("run: exit %d, no %q:\n%s%s", code, want, stdout, stderr)
	}
	env, err := os.ReadFile(filepath.Join(out, "launch.json"))
	if err != nil {
		t.Fatal(err)
	}
	launch, err := attest.ReadLaunch(env)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(launch.Policy.Protect, "tools/hooks/**") || !slices.Contains(launch.Policy.Protect, ".husky/**") {
		t.Errorf("the launch record's policy protects %q", launch.Policy.Protect)
	}
	e.mustCLI(0, "apply", "--state-dir", e.state, out)
	if b, _ := os.ReadFile(filepath.Join(e.ws, "tools/build.sh")); string(b) != "true\nx\n" {
		t.Errorf("tools/build.sh = %q: an ordinary edit beside was not applied", b)
	}
	operatorGit(t, e.ws, home, "commit", "-q", "--allow-empty", "-m", "review")
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the operator's git commit ran the agent's hook")
	}
	// --allow for the hooks directory lets a hook through, unwarned.
	args = []string{"run", "--workspace", e.ws, "--key", e.key, "--out", filepath.Join(e.dir, "run2"), "--state-dir", e.state,
		"--allow", "tools/hooks/**", "--", "/bin/sh", "-ec", "mkdir tools/hooks; echo true > tools/hooks/pre-push"}
	code, stdout, stderr = e.cliEnv([]string{"HOME=" + home, "XDG_CONFIG_HOME="}, args...)
	if _, err := os.Stat(filepath.Join(e.ws, "tools/hooks/pre-push")); code != 0 || err != nil || strings.Contains(stderr, "protected") {
		t.Errorf("run2 with --allow tools/hooks/**: exit %d, %v:\n%s%s", code, err, stdout, stderr)
	}
}

// TestRulesCommand: layerseal rules prints the built-in table, and with
// --workspace what the workspace adds, in text and JSON.
func TestRulesCommand(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	home := filepath.Join(dir, "home")
	write(t, home, map[string]string{".gitconfig": "[core]\n\thooksPath = ci/hooks\n"})
	write(t, ws, map[string]string{"layerseal.yaml": "protected: [deploy/**]\n", ".git/config": "[core]\n\tbare = false\n"})
	e := &env{t: t, dir: dir}
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=", "SUDO_USER="}
	code, stdout, stderr := e.cliEnv(env, "rules")
	if code != 0 {
		t.Fatalf("rules: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "RULE ") || len(lines) != 1+len(policy.Builtin()) {
		t.Errorf("rules: %d lines, want a header and %d rows:\n%s", len(lines), len(policy.Builtin()), stdout)
	}
	for _, want := range []string{".git/rebase-merge/**", ".husky/**", ".claude/**", policy.RuleSetuid} {
		if !strings.Contains(stdout, "\n"+want+" ") {
			t.Errorf("rules lacks a row for %s:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = e.cliEnv(env, "rules", "--json", "--workspace", ws)
	if code != 0 {
		t.Fatalf("rules --json --workspace: exit %d: %s", code, stderr)
	}
	type row struct {
		Rule   string `json:"rule"`
		Tool   string `json:"tool"`
		Reason string `json:"reason"`
	}
	var v struct {
		Builtin   []row `json:"builtin"`
		Workspace []row `json:"workspace"`
	}
	if err := json.Unmarshal([]byte(stdout), &v, json.RejectUnknownMembers(true)); err != nil {
		t.Fatalf("rules --json: %v\n%s", err, stdout)
	}
	if len(v.Builtin) != len(policy.Builtin()) || v.Builtin[0].Rule != policy.FileName || v.Builtin[0].Reason == "" {
		t.Errorf("rules --json builtin: %+v", v.Builtin)
	}
	if len(v.Workspace) != 2 || v.Workspace[0].Rule != "deploy/**" || v.Workspace[1].Rule != "ci/hooks/**" ||
		!strings.Contains(v.Workspace[1].Reason, filepath.Join(home, ".gitconfig")+" line 2") {
		t.Errorf("rules --json --workspace: %+v", v.Workspace)
	}
	if code, _, stderr := e.cliEnv(env, "rules", "extra"); code != exitUsage {
		t.Errorf("rules extra: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}
