package layerseal

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/review"
)

// agentCommits finds the commits the agent made: those reachable from
// its HEAD in the change set's merged view that the workspace's
// repository does not hold. It checks them and every object they need
// (agentRepo.agentCommits) and returns the newest and how many there
// are ("" and 0 when the agent made none). Nothing is written.
func (g gitCmd) agentCommits(upper int, ws *os.File, entries []attest.Entry, launch string) (*agentObjects, string, error) {
	repo := newAgentRepo(upper, int(ws.Fd()), entries, len(launch))
	defer repo.closePacks()
	if len(repo.changed) == 0 {
		return nil, "", nil
	}
	tip, ok, err := repo.head()
	if err != nil {
		return nil, "", fmt.Errorf("the agent's HEAD: %w; %w", err, ErrGitBranch)
	}
	if !ok || tip == launch {
		return nil, "", nil
	}
	cmd := g.command(nil, "cat-file", "--batch-check")
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("git cat-file: %w", err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	lines := bufio.NewReader(outPipe)
	has := func(id string) (bool, error) {
		if _, err := io.WriteString(in, id+"\n"); err != nil {
			return false, fmt.Errorf("git cat-file: %w", err)
		}
		l, err := lines.ReadString('\n')
		if err != nil {
			return false, fmt.Errorf("git cat-file: %w", err)
		}
		return !strings.HasSuffix(l, " missing\n"), nil
	}
	objs, err := repo.agentCommits(tip, has)
	if err != nil {
		return nil, "", fmt.Errorf("%w; %w", err, ErrGitBranch)
	}
	if len(objs.Commits) == 0 {
		objs.Close()
		return nil, "", nil
	}
	return objs, tip, nil
}

// writeObjects writes the agent's objects into the workspace's
// repository as one pack, through `git index-pack --stdin --strict`:
// git hashes every object again, checks it is well formed, and that
// every object it names is in the pack or the repository.
func (g gitCmd) writeObjects(objs *agentObjects, hexLen int) error {
	cmd := g.command(nil, "index-pack", "--stdin", "--strict")
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git index-pack: %w", err)
	}
	werr := objs.writePack(in, (&agentRepo{hexLen: hexLen}).newHash())
	in.Close()
	if err := cmd.Wait(); err != nil || werr != nil {
		return fmt.Errorf("git index-pack: %s: %w", strings.TrimSpace(stderr.String()+" "+errString(werr)), ErrGitBranch)
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// reverts returns the fast-import commands that take back, on top of
// the agent's commit tip, what its commits changed since launch: each
// path `git diff-tree` finds between the two gets launch's version (or
// is removed). The change set's own commands follow them and win: what
// is left is what the agent committed and then undid in its working tree
// without committing.
func (g gitCmd) reverts(launch, tip string) ([]string, error) {
	out, err := g.out(nil, "diff-tree", "-r", "-z", "--no-renames", launch, tip)
	if err != nil {
		return nil, fmt.Errorf("%w; %w", err, ErrGitBranch)
	}
	var dels, mods []string
	f := strings.Split(out, "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		meta := strings.Fields(strings.TrimPrefix(f[i], ":"))
		if len(meta) < 5 {
			return nil, fmt.Errorf("git diff-tree: unexpected output %q: %w", f[i], ErrGitBranch)
		}
		p := review.Quote(f[i+1])
		if meta[0] == "000000" {
			dels = append(dels, "D "+p)
		} else {
			mods = append(mods, fmt.Sprintf("M %s %s %s", meta[0], meta[2], p))
		}
	}
	return append(dels, mods...), nil
}

// gitDirs are the directories of the workspace's .git that writing the
// branch NAME can change, with their ctime now (0 for one absent).
func gitDirs(ws *os.File, name string) map[attest.Path]int64 {
	dirs := map[attest.Path]int64{".git/objects": 0, ".git/objects/pack": 0}
	for _, top := range []string{".git/refs/heads/", ".git/logs/refs/heads/"} {
		for p := parentPath(attest.Path(top + name)); p != ".git"; p = parentPath(p) {
			dirs[p] = 0
		}
	}
	for d := range dirs {
		if st, err := statBeneath(int(ws.Fd()), d); err == nil {
			dirs[d] = st.CtimeNS
		}
	}
	return dirs
}

// gitTouched are the directories of before (gitDirs) that writing the
// branch changed, with their ctime after, and that nobody had changed
// since the launch: a later apply of the change set (whose .git entries
// lie beside them) knows those changes as the session's own.
func gitTouched(ws *os.File, name string, before map[attest.Path]int64, since int64) []touched {
	var out []touched
	for d, c := range gitDirs(ws, name) {
		if was := before[d]; c != was && was < since {
			out = append(out, touched{Path: d, CtimeNS: c})
		}
	}
	slices.SortFunc(out, func(a, b touched) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return out
}
