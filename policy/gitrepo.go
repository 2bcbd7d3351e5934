package policy

// RuleGitRepository is the built-in rule a change breaks by what the
// operator's git will do with it, wherever it lies (excluded subtrees
// too): git's discovery takes any directory with a .git entry, or with
// the layout of a bare repository, for a repository, and then runs the
// commands its configuration, hooks and unfinished operations name.
// Broken by a .git entry added or changed but for a directory that stays
// one; by the entries that give a directory git's repository layout
// (HEAD, objects, refs, commondir) where it had none; and, in any
// directory git takes for a repository before or after the change, by a
// change to its config, commondir, hooks, info or the state of a rebase
// or cherry-pick left in progress, but not by git's ordinary work
// (objects, refs, HEAD, index, logs).
const RuleGitRepository = "(git repository)"
