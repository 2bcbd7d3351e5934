package layerseal

import (
	"bytes"
	"os"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// gitHead is a git repository's HEAD as the session found it at launch.
type gitHead struct {
	// Ref is the branch HEAD named ("refs/heads/main"); "" when HEAD
	// was detached.
	Ref string `json:"ref,omitempty"`
	// Commit is the commit HEAD resolved to (hex).
	Commit string `json:"commit"`
}

// readGitHead reads the HEAD of the git repository whose work tree is the
// workspace ws, from ws/.git beneath the workspace descriptor (no symlink
// followed, git not run): HEAD, then the branch's loose ref or its line in
// packed-refs. It returns nil when the workspace holds no such repository
// or HEAD cannot be resolved this way (a .git file of a linked work tree,
// an unborn branch, another ref store).
func readGitHead(ws *os.File) *gitHead {
	if ws == nil {
		return nil
	}
	root := int(ws.Fd())
	read := func(p string) []byte {
		b, err := readBeneath(root, attest.Path(p), 4096)
		if err != nil || len(b) > 1<<20 {
			return nil
		}
		return b
	}
	head := strings.TrimSpace(string(read(".git/HEAD")))
	if isHex(head) {
		return &gitHead{Commit: head}
	}
	ref, ok := strings.CutPrefix(head, "ref: ")
	if !ok || !strings.HasPrefix(ref, "refs/heads/") || strings.Contains(ref, "..") || strings.ContainsAny(ref, "\x00\\") {
		return nil
	}
	if c := strings.TrimSpace(string(read(".git/" + ref))); isHex(c) {
		return &gitHead{Ref: ref, Commit: c}
	}
	for _, line := range bytes.Split(read(".git/packed-refs"), []byte("\n")) {
		if c, name, ok := strings.Cut(string(line), " "); ok && name == ref && isHex(c) {
			return &gitHead{Ref: ref, Commit: c}
		}
	}
	return nil
}

// isHex reports whether s is a full SHA-1 or SHA-256 object id.
func isHex(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
