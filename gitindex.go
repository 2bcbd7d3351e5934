package layerseal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/gitindex"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/policy"
)

// gitIndexPath is the index of the workspace's repository.
const gitIndexPath attest.Path = ".git/index"

// isGitIndex reports whether p is the index of a repository whose .git
// directory is in the workspace: .git/index, or DIR/.git/index for a
// repository beneath (a nested clone, a submodule with its .git inside).
func isGitIndex(p attest.Path) bool {
	return p == gitIndexPath || strings.HasSuffix(string(p), "/"+string(gitIndexPath))
}

// gitIndexViolations compares the index of each repository in the
// workspace that the change set changes (.git/index, and DIR/.git/index
// beneath) as it was at launch (in the lower layer) with the one the
// change set leaves (read from the upper layer), and returns a violation
// at the index when the new one hides an edit from git, adds or moves a
// gitlink, or cannot be read in full (policy.RuleIndex*; the most
// serious when several apply). An index the change set removes breaks
// none; neither does one an allow covers. A launch index that cannot be
// read in full (the operator's split or sparse index), or that is not
// there, counts as empty: every flag and gitlink of the new one is then
// new.
//
// Where the workspace's .git is not a directory (a linked work tree's or
// a submodule's "gitdir:" file), the index lies outside the workspace and
// out of the agent's reach: an index the change set makes there is
// compared with an empty one (and the .git it needs breaks the built-in
// glob of .git anyway).
func gitIndexViolations(r *reader, entries []attest.Entry) ([]attest.Violation, error) {
	var out []attest.Violation
	for _, e := range entries {
		if !isGitIndex(e.Path) || e.New == nil || r.rules.Allowed(e.Path) {
			continue
		}
		rule, err := gitIndexRule(r, e.Path, e.New)
		if err != nil {
			return nil, err
		}
		if rule != "" {
			out = append(out, attest.Violation{Path: e.Path, Rule: rule})
		}
	}
	return out, nil
}

// gitIndexRule names the rule the index at p, whose new state is new,
// breaks: "" for none.
func gitIndexRule(r *reader, p attest.Path, new *attest.State) (string, error) {
	if new.Type != attest.File {
		return policy.RuleIndexUnread, nil
	}
	upper, err := linux.Openat(unix.AT_FDCWD, r.upper, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open the upper layer: %w", err)
	}
	defer linux.Close(upper)
	b, err := readIndex(upper, p)
	if err != nil || new.SHA256 != nil && !bytes.Equal(sha(b), new.SHA256) {
		// Too large, or not there to read as the statement says.
		return policy.RuleIndexUnread, nil
	}
	after, err := gitindex.Parse(b)
	if err != nil {
		return policy.RuleIndexUnread, nil
	}
	before, err := lowerIndex(r, p)
	if err != nil {
		return "", err
	}
	if before == nil {
		before = &gitindex.Index{}
	}
	return indexRule(before, after), nil
}

// indexRule compares two indexes: RuleIndexGitlink when after holds a
// gitlink before did not (at that path, to that commit),
// RuleIndexHides when an entry of after is assume-unchanged or
// skip-worktree and no entry of before at its path was so, "" otherwise.
func indexRule(before, after *gitindex.Index) string {
	type was struct {
		assume, skip bool
		gitlinks     []string
	}
	old := make(map[string]*was, len(before.Entries))
	for _, e := range before.Entries {
		w := old[string(e.Path)]
		if w == nil {
			w = &was{}
			old[string(e.Path)] = w
		}
		w.assume = w.assume || e.AssumeValid
		w.skip = w.skip || e.SkipWorktree
		if e.Mode == gitindex.ModeGitlink {
			w.gitlinks = append(w.gitlinks, string(e.OID))
		}
	}
	hides := false
	for _, e := range after.Entries {
		w := old[string(e.Path)]
		if w == nil {
			w = &was{}
		}
		if e.Mode == gitindex.ModeGitlink && !slices.Contains(w.gitlinks, string(e.OID)) {
			return policy.RuleIndexGitlink
		}
		if e.AssumeValid && !w.assume || e.SkipWorktree && !w.skip {
			hides = true
		}
	}
	if hides {
		return policy.RuleIndexHides
	}
	return ""
}

// lowerIndex reads the index at p (.git/index or DIR/.git/index) at
// launch, from the workspace: an empty index when there is no .git
// directory there (none, a file, beneath a symlink) or no index in it,
// nil when the index is there but cannot be read in full.
func lowerIndex(r *reader, p attest.Path) (*gitindex.Index, error) {
	var lower int
	var err error
	if r.lowerDir != nil {
		lower, err = linux.OpenBeneath(int(r.lowerDir.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	} else {
		lower, err = linux.Openat(unix.AT_FDCWD, r.lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	}
	if err != nil {
		return nil, fmt.Errorf("open the workspace: %w", err)
	}
	defer linux.Close(lower)
	git := strings.TrimSuffix(string(p), "/index")
	dir, err := linux.OpenBeneath(lower, git, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return &gitindex.Index{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the workspace's %q: %w", git, err)
	}
	defer linux.Close(dir)
	b, err := readIndex(dir, "index")
	if errors.Is(err, unix.ENOENT) {
		return &gitindex.Index{}, nil
	}
	if err != nil {
		return nil, nil
	}
	ix, err := gitindex.Parse(b)
	if err != nil {
		return nil, nil
	}
	return ix, nil
}

// readIndex reads the index at p beneath dir, no symlink followed: a
// regular file of at most gitindex.MaxSize bytes.
func readIndex(dir int, p attest.Path) ([]byte, error) {
	fd, err := linux.OpenBeneath(dir, string(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), err)
	}
	f := os.NewFile(uintptr(fd), string(p))
	defer f.Close()
	st, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q is not a regular file", string(p))
	}
	if st.Size > gitindex.MaxSize {
		return nil, fmt.Errorf("%q: %d bytes, more than %d", string(p), st.Size, gitindex.MaxSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, gitindex.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), err)
	}
	return b, nil
}
