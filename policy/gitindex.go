package policy

// Built-in rules on the workspace repository's index (.git/index), which
// decides what git status and git diff look at and where git status
// recurses. A change to the index breaks one of them when, compared with
// the index at launch, it
const (
	// marks an entry assume-unchanged or skip-worktree: git then shows
	// no edit of that file, so the change set's edit is hidden from a
	// review with git;
	RuleIndexHides = "(git index hides edits)"
	// adds a gitlink (mode 160000) or points one at another commit: git
	// status runs git in that directory as in a submodule, with whatever
	// config and hooks it holds;
	RuleIndexGitlink = "(git index gitlink)"
	// cannot be read in full (damaged, an unknown version, a split or
	// sparse index, not a regular file): it is not known to be clean.
	RuleIndexUnread = "(git index unreadable)"
)
