package policy

import (
	"slices"
	"strings"
)

// A RuleRow is one row of a table of rules, such as Builtin's. Its Rule
// is a glob, or the name of a rule checked by what a change is rather
// than where it lies, in parentheses (RuleSetuid, ...). An --allow of a
// path lifts every rule for that path for one run.
type RuleRow struct {
	Rule   string // a glob, or a named rule such as "(setuid file)"
	Tool   string // the program that acts on what the rule keeps
	Reason string // what that program runs, grants or hides from there
}

// Named reports whether r is a named rule, not a glob.
func (r RuleRow) Named() bool { return strings.HasPrefix(r.Rule, "(") }

// Builtin returns the table of built-in rules: what git, hook managers,
// editors and coding agents run or hide when the operator reviews the
// change set (runs git in the workspace, opens it in an editor or another
// agent), as opposed to what runs when the operator builds or runs what
// the agent wrote, which the change set shows. The globs come first, in
// the order sessions record them, then the named rules. Each call returns
// a fresh copy.
//
// Files that only carry instructions for an agent (CLAUDE.md, AGENTS.md,
// .cursorrules) are not in it: they are prompt text, shown by diff like
// any other file, and run nothing by themselves.
func Builtin() []RuleRow { return slices.Clone(builtin) }

// BuiltinGlobs returns the globs of Builtin, in order: what every
// session's policy protects, and records in its launch record.
func BuiltinGlobs() []string {
	var out []string
	for _, r := range builtin {
		if !r.Named() {
			out = append(out, r.Rule)
		}
	}
	return out
}

// builtinGlob reports whether text is one of the table's globs.
func builtinGlob(text string) bool {
	for _, r := range builtin {
		if r.Rule == text && !r.Named() {
			return true
		}
	}
	return false
}

// builtin is the table Builtin returns. One row per glob or named rule;
// the tool is who acts on it, the reason what that tool does with it.
var builtin = []RuleRow{
	{FileName, "layerseal", "the next session's policy"},

	// The workspace's repository.
	{".git/config", "git", "core.fsmonitor, core.pager, core.hooksPath, aliases, filters, helpers: commands git runs"},
	{".git/config.worktree", "git", "per-worktree config (extensions.worktreeConfig): the same commands"},
	{".git/commondir", "git", "points git at another repository's config and hooks"},
	{".git/hooks/**", "git", "scripts git runs on commit, checkout, merge and push"},
	{".git/info/**", "git", "exclude and attributes: what git status hides, how git diff shows it"},
	{".git/modules/**", "git", "the submodules' repositories, each with its config and hooks"},
	{".git/worktrees/**", "git", "linked worktrees' pointers and config"},
	{".gitmodules", "git", "where submodules come from"},
	{".git/rebase-merge/**", "git rebase", "a stopped rebase's todo list: git rebase --continue runs its exec lines"},
	{".git/rebase-apply/**", "git am, git rebase", "a stopped am or rebase: --continue commits the patches it holds"},
	{".git/sequencer/**", "git cherry-pick, git revert", "a stopped pick or revert: --continue replays its todo list with its options"},

	// Hook managers: what they run on git commit and push.
	{".githooks/**", "git", "the directory repositories point core.hooksPath at: hook scripts"},
	{".husky/**", "husky", "hook scripts (core.hooksPath .husky/_ runs .husky/HOOK)"},
	{".pre-commit-config.yaml", "pre-commit", "hooks and the commands they run (repo: local, entry)"},
	{"lefthook.*", "lefthook", "hooks and the commands they run"},
	{".lefthook.*", "lefthook", "hooks and the commands they run"},
	{"lefthook-local.*", "lefthook", "hooks merged over the main config"},
	{".lefthook-local.*", "lefthook", "hooks merged over the main config"},
	{".config/lefthook.*", "lefthook", "hooks and the commands they run"},
	{".config/lefthook-local.*", "lefthook", "hooks merged over the main config"},
	{".lefthook/**", "lefthook", "scripts its hooks run (source_dir)"},
	{".lefthook-local/**", "lefthook", "scripts its local hooks run (source_dir_local)"},
	{".overcommit.yml", "overcommit", "hooks and the commands they run"},
	{"hk.pkl", "hk", "hooks and the commands they run"},

	// Editors' and coding agents' project settings.
	{".vscode/**", "VS Code", "settings and tasks that name programs to run"},
	{".idea/**", "JetBrains IDEs", "run configurations, tools and settings that name programs"},
	{".claude/**", "Claude Code", "settings: hooks, apiKeyHelper, statusLine, MCP servers: commands it runs"},
	{".mcp.json", "Claude Code, MCP clients", "MCP servers: commands started for the project"},
	{".cursor/**", "Cursor", "mcp.json servers, hooks.json: commands it runs"},
	{".gemini/**", "Gemini CLI", "settings.json: mcpServers and hooks, commands it runs"},
	{".codex/**", "Codex", "config.toml: mcp_servers, commands it runs in a trusted project"},
	{".continue/**", "Continue", "MCP servers and config: commands it runs"},
	{".windsurf/**", "Windsurf", "hooks.json: commands Cascade runs"},
	{".kiro/**", "Kiro", "hooks (runCommand) and settings/mcp.json: commands it runs"},
	{".aider.conf.yml", "aider", "lint-cmd and test-cmd, run after its edits"},
	{".zed/**", "Zed", "settings and tasks: language servers and commands"},
	{".helix/**", "Helix", "languages.toml: language server commands"},
	{".nvim.lua", "Neovim", "Lua run on opening the directory ('exrc')"},
	{".nvimrc", "Neovim", "Vim script run on opening the directory ('exrc')"},
	{".exrc", "Vim, Neovim", "Vim script run on opening the directory ('exrc')"},
	{".vimrc", "Vim", "Vim script run on opening the directory ('exrc')"},
	{".dir-locals.el", "Emacs", "directory variables: eval forms run Lisp (after a prompt)"},
	{".envrc", "direnv", "shell code run on entering the directory (once allowed)"},
	{"mise.toml", "mise", "hooks run on entering the directory, env scripts it sources, tasks"},
	{"mise.*.toml", "mise", "the same, for an environment or local"},
	{".mise.toml", "mise", "the same as mise.toml"},
	{".mise.*.toml", "mise", "the same, for an environment or local"},
	{".mise/**", "mise", "config and tasks"},
	{".config/mise.toml", "mise", "the same as mise.toml"},
	{".config/mise/**", "mise", "config and tasks"},
	{".devcontainer/**", "Dev Containers", "initializeCommand (on the host), postCreateCommand and the image built"},
	{".devcontainer.json", "Dev Containers", "initializeCommand (on the host), postCreateCommand and the image built"},

	// A repository anywhere beneath, such as a submodule whose .git the
	// agent made a directory: git status runs git in each submodule.
	{gitLink, "git", "a .git file or link: points git at a config and hooks elsewhere"},
	{"**/.git/config", "git", "a nested repository's config: commands git runs there"},
	{"**/.git/commondir", "git", "points a nested repository at another's config and hooks"},
	{"**/.git/hooks/**", "git", "a nested repository's hooks"},

	// Named rules: checked by what a change is, wherever it
	// lies (ChangeViolation, or the sweep). One row each; a test checks.
	{RuleSetuid, "the kernel", "a regular file that runs as its owner"},
	{RuleSetgid, "the kernel", "a regular file that runs as its group"},
	{RuleCapabilities, "the kernel", "security.capability: the file runs with capabilities"},
	{RuleDevice, "the kernel", "a char or block device: the host's hardware or memory"},
	{RuleGrantsWrite, "the kernel", "lets someone write who could not write there before the run: owner, group or other write bits, ACL entries"},
	// Named rules by what git will do, checked by reading the repository
	// as the change set leaves it (the sweep).
	{RuleGitRepository, "git", "a .git entry or a bare layout makes a directory a repository; its config, hooks, info or stopped rebase run commands"},
	{RuleIndexHides, "git", "an index entry marked assume-unchanged or skip-worktree: git status and git diff show no edit there"},
	{RuleIndexGitlink, "git", "a new gitlink in the index: git status runs git in that directory as in a submodule"},
	{RuleIndexUnread, "git", "an index that cannot be read in full is not known to be clean"},
}
