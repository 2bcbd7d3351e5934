package layerseal

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// conflicts returns the paths, among paths (sorted by bytes), whose
// workspace entry someone changed at or after since, a time on the clock
// file times are stamped with (linux.CoarseNow): the entry's ctime, or,
// for an entry absent from the workspace (created by the agent, or removed
// by someone else), the ctime of its nearest existing ancestor directory.
// Nothing can set a ctime back, so an entry whose ctime is older than
// since is as it was at since. A ctime in whole seconds within since's
// second counts as later too (a filesystem with one-second times cannot
// say which). It costs one statx per path plus at most
// one per distinct ancestor of an absent one: O(changes), never a walk of
// the workspace. A workspace root that cannot be opened conflicts as a
// whole.
func conflicts(ws *os.File, paths []attest.Path, since time.Time) []attest.Path {
	return conflictsBut(ws, paths, since, nil)
}

// conflictsBut is conflicts, except that an entry whose ctime is the one
// ours records for its path (a directory a partial apply of the session
// wrote into, stamped right after) counts as unchanged.
func conflictsBut(ws *os.File, paths []attest.Path, since time.Time, ours map[attest.Path]int64) []attest.Path {
	root, err := linux.OpenBeneath(int(ws.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return []attest.Path{attest.Root}
	}
	defer linux.Close(root)
	limit := since.UnixNano()
	second := limit - limit%int64(time.Second)
	ancestor := map[attest.Path]bool{} // nearest-existing-ancestor results
	// Paths found absent: what lies beneath them is absent too, without
	// a failing open of its parent for each (many new files in a new
	// directory).
	gone := map[attest.Path]bool{}
	changedAt := func(p attest.Path) (bool, bool) {
		if p != attest.Root && gone[parentPath(p)] {
			gone[p] = true
			return false, false
		}
		st, err := statBeneath(root, p)
		if err != nil {
			gone[p] = true
			return false, false
		}
		if c, ok := ours[p]; ok && c == st.CtimeNS {
			return false, true
		}
		// A ctime in whole seconds may come from a filesystem that keeps
		// no finer times: within the launch's second it may be later.
		coarse := st.CtimeNS%int64(time.Second) == 0 && st.CtimeNS >= second
		return st.CtimeNS >= limit || coarse, true
	}
	var out []attest.Path
	for _, p := range paths {
		changed, exists := changedAt(p)
		if !exists {
			changed = ancestorChanged(p, changedAt, ancestor)
		}
		if changed {
			out = append(out, p)
		}
	}
	return out
}

// ancestorChanged reports whether the nearest existing ancestor of p
// changed, remembering the answer for each ancestor it looked at.
func ancestorChanged(p attest.Path, changedAt func(attest.Path) (bool, bool), memo map[attest.Path]bool) bool {
	if p == attest.Root {
		return true // the root itself is gone
	}
	parent := attest.Root
	if i := strings.LastIndexByte(string(p), '/'); i >= 0 {
		parent = p[:i]
	}
	if c, ok := memo[parent]; ok {
		return c
	}
	c, exists := changedAt(parent)
	if !exists {
		c = ancestorChanged(parent, changedAt, memo)
	}
	memo[parent] = c
	return c
}

// statBeneath stats p (attest.Root for the root) beneath root without
// following a symlink in any component.
func statBeneath(root int, p attest.Path) (linux.Stat, error) {
	if p == attest.Root {
		return linux.Lstat(root, "")
	}
	parent, base := filepath.Split(string(p))
	if parent == "" {
		return linux.Lstat(root, base)
	}
	fd, err := linux.OpenBeneath(root, strings.TrimSuffix(parent, "/"), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return linux.Stat{}, err
	}
	defer linux.Close(fd)
	return linux.Lstat(fd, base)
}

// conflictReasons are the statement's reasons for conflicting paths.
func conflictReasons(paths []attest.Path) []attest.Reason {
	out := make([]attest.Reason, 0, len(paths))
	for _, p := range paths {
		out = append(out, attest.Reason{Code: attest.Conflict, Path: p,
			Detail: "changed in the workspace after the launch by someone other than the agent: its old state is the workspace's after that change, not necessarily the one the agent started from; apply leaves it alone unless told otherwise"})
	}
	return out
}

// statementPaths are the paths of st a conflict check looks at: every
// listed change and every excluded subtree's root.
func statementPaths(st *attest.Statement) []attest.Path {
	out := make([]attest.Path, 0, len(st.Entries)+len(st.Excluded))
	for _, e := range st.Entries {
		out = append(out, e.Path)
	}
	for _, x := range st.Excluded {
		out = append(out, x.Path)
	}
	return out
}

// conflictText lists paths for a message: the first few, quoted, and how
// many more.
func conflictText(paths []attest.Path) string {
	const show = 10
	var b strings.Builder
	for i, p := range paths {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(paths)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", string(p))
	}
	return b.String()
}
