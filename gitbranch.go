package layerseal

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/review"
)

// ErrGitBranch is wrapped by ApplyToGitBranch's refusals: nothing was
// written to the repository and the change set stays staged.
var ErrGitBranch = errors.New("nothing was written to the repository")

// GitBranchResult is what ApplyToGitBranch did.
type GitBranchResult struct {
	Branch string // refs/heads/NAME
	Commit string // the commit made
	Parent string // the workspace's HEAD at launch
	// AgentCommits counts the commits the agent made that the branch
	// took over, below the commit made.
	AgentCommits int
	// Committed counts the changes the commit holds (directories among
	// them, which git holds through their files).
	Committed int
	// Left are the changes left out of the commit, each with why:
	// inside .git, ignored by git, or not a file git holds. (The whole
	// change set stays staged.)
	Left []LeftChange
}

// LeftChange is a change ApplyToGitBranch left out of its commit.
type LeftChange struct {
	Path attest.Path
	Why  string
}

// ApplyToGitBranch writes the staged change set of the session out to
// the new branch NAME of the git repository the workspace is, and leaves
// the workspace as it is: its working tree, index, HEAD and checked-out
// branch, and the change set stays staged (for Apply to the working tree,
// or Discard). The session is then on the branch (StateBranch).
//
// The commits the agent made (reachable from HEAD in the change set's
// merged view of .git, and not in the workspace's repository) become the
// branch's history as they are, with their messages, authors, dates and
// ids: their objects are read from the session's loose objects and the
// pack files the agent's git wrote, never by git (the agent's
// repository's config, hooks, alternates, grafts and replace refs are
// never looked at), each file checked against the statement's digest and
// each object against its id, within bounds on count, size and delta
// depth, and written as one pack through `git index-pack --strict`, which
// checks them again. A history that cannot be read this way is refused:
// an object that is corrupt or missing from the session's objects and
// the workspace's repository, a malformed pack, too many commits or
// objects. Of the
// agent's .git, only those objects reach the workspace's repository.
//
// On top (or on the workspace's HEAD at launch when the agent made no
// commit) comes one commit of what the agent left uncommitted: the change
// set, each file streamed from the upper layer by `git fast-import` and
// checked against the statement's digest, over the agent's last commit
// with what its commits changed and its working tree undid taken back.
// Its message names the session and carries the trailers
// "Layerseal-Statement: sha256:HEX" (the signed statement's digest) and
// "Layerseal-Session: ID". Changes inside .git are never committed, paths
// git ignores (`git check-ignore`, the workspace's ignore rules) are left
// out, and so are FIFOs, devices and sockets: all listed in Left.
//
// Refused with nothing written (ErrGitBranch): a workspace that is not
// the top of a git repository, a branch that exists (unless it is this
// session's own commit, from a run that stopped before recording it:
// then only the record is written), a session that did not record HEAD
// at launch, a detached HEAD that moved since, an index holding staged
// changes, and agent commits refused as above.
func (store *Store) ApplyToGitBranch(out, name string) (*GitBranchResult, error) {
	s, err := store.openStaged(out)
	if err != nil {
		return nil, err
	}
	lock, err := s.lock(store)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	if s.j != nil && s.j.State == journalApplying {
		return nil, fmt.Errorf("session %s: %w; run `layerseal apply %s` to finish it first", s.rec.ID, ErrInterrupted, s.rec.ID)
	}
	if s.j != nil && s.j.GitCommit != "" {
		return nil, fmt.Errorf("session %s was written to git branch %s (commit %s) already: %w", s.rec.ID, strings.TrimPrefix(s.j.GitBranch, "refs/heads/"), s.j.GitCommit, ErrGitBranch)
	}
	if lowerMoved(s.st.Incomplete) || unexamined(s.st.Incomplete) {
		return nil, fmt.Errorf("parts of the change set were not examined (see the incomplete reasons): %w", ErrGitBranch)
	}
	ws, err := openWorkspace(s.rec.Workspace, s.launch.Lower)
	if err != nil {
		return nil, fmt.Errorf("%w; %w", err, ErrGitBranch)
	}
	defer ws.Close()
	g := newGitCmd(s.rec.Workspace)
	res := &GitBranchResult{Branch: "refs/heads/" + name}
	if err := g.check(name, s.rec.GitHead); err != nil {
		return nil, err
	}
	res.Parent = s.rec.GitHead.Commit
	statement := fmt.Sprintf("%x", sha256.Sum256(s.env))
	if c, _ := g.out(nil, "rev-parse", "-q", "--verify", res.Branch+"^{commit}"); c != "" {
		msg, _ := g.out(nil, "log", "-1", "--format=%B", c)
		if !strings.Contains(msg, "Layerseal-Session: "+s.rec.ID+"\n") || !strings.Contains(msg, "Layerseal-Statement: sha256:"+statement+"\n") {
			return nil, fmt.Errorf("branch %q exists: %w; choose another name", name, ErrGitBranch)
		}
		res.Commit = c // made by an earlier run that stopped before its record
	}

	entries, err := s.entries(ws)
	if err != nil {
		return nil, err
	}
	entries = s.unsettled(entries)
	var ours []touched
	var commit []attest.Entry
	var candidates []string
	for _, e := range entries {
		switch {
		case e.Path == ".git" || attest.Within(e.Path, ".git"):
			res.Left = append(res.Left, LeftChange{e.Path, "inside .git: never committed"})
		case e.New != nil && review.GitMode(e.New.Type, e.New.Mode) == 0 && e.New.Type != attest.Dir:
			res.Left = append(res.Left, LeftChange{e.Path, "not a file git holds (a FIFO, a device or a socket)"})
		default:
			commit = append(commit, e)
			if e.New != nil && e.Path != attest.Root {
				candidates = append(candidates, string(e.Path))
			}
		}
	}
	ignored, err := g.ignored(candidates, ws, s.dir.upper(), entries)
	if err != nil {
		return nil, err
	}
	commit = slices.DeleteFunc(commit, func(e attest.Entry) bool {
		if ignored[string(e.Path)] {
			res.Left = append(res.Left, LeftChange{e.Path, "ignored by git"})
			return true
		}
		return false
	})
	// A directory holding a change left staged stays staged with it, so
	// that a later apply of what is left has it.
	commit = slices.DeleteFunc(commit, func(e attest.Entry) bool {
		if e.New == nil || e.New.Type != attest.Dir || e.Path == attest.Root {
			return false
		}
		for _, l := range res.Left {
			if attest.Within(l.Path, e.Path) && l.Path != e.Path {
				res.Left = append(res.Left, LeftChange{e.Path, "holds changes left staged"})
				return true
			}
		}
		return false
	})
	slices.SortFunc(res.Left, func(a, b LeftChange) int { return strings.Compare(string(a.Path), string(b.Path)) })

	if res.Commit == "" {
		upper, err := linux.Openat(unix.AT_FDCWD, s.dir.upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if err != nil {
			return nil, fmt.Errorf("session %s: its upper layer: %w", s.rec.ID, unwrapPath(err))
		}
		defer linux.Close(upper)
		objs, tip, err := g.agentCommits(upper, ws, entries, res.Parent)
		if err != nil {
			return nil, err
		}
		defer objs.Close()
		before := gitDirs(ws, name)
		from, msg := res.Parent, fmt.Sprintf("layerseal: session %s\n\nThe change set of layerseal session %s, as its signed statement lists it.\n\nLayerseal-Statement: sha256:%s\nLayerseal-Session: %s\n", s.rec.ID, s.rec.ID, statement, s.rec.ID)
		var pre []string
		if tip != "" {
			if err := g.writeObjects(objs, len(res.Parent)); err != nil {
				return nil, err
			}
			if pre, err = g.reverts(res.Parent, tip); err != nil {
				return nil, err
			}
			from, res.AgentCommits = tip, len(objs.Commits)
			msg = fmt.Sprintf("layerseal: session %s, uncommitted\n\nWhat the agent of layerseal session %s left uncommitted on top of its\n%d commit(s), as the session's signed statement lists it.\n\nLayerseal-Statement: sha256:%s\nLayerseal-Session: %s\n", s.rec.ID, s.rec.ID, len(objs.Commits), statement, s.rec.ID)
		}
		if err := g.fastImport(res.Branch, from, msg, pre, upper, commit); err != nil {
			if tip != "" {
				// No ref names them: `git gc` prunes them in time.
				return nil, fmt.Errorf("%w (no ref was written; the agent's objects were, as a pack no ref names)", err)
			}
			return nil, err
		}
		if res.Commit, err = g.out(nil, "rev-parse", "--verify", res.Branch+"^{commit}"); err != nil {
			return nil, fmt.Errorf("the new branch %q: %w", name, err)
		}
		ours = gitTouched(ws, name, before, launchedAt(s.rec, s.launch).UnixNano())
	} else if n, err := g.out(nil, "rev-list", "--count", res.Parent+".."+res.Commit); err == nil {
		c, _ := strconv.Atoi(n)
		res.AgentCommits = max(c-1, 0)
	}
	res.Committed = len(commit)

	// The workspace is as it was: the change set stays staged, for an
	// apply to the working tree or a discard; the journal names the
	// branch.
	var j journal
	if s.j != nil {
		j = *s.j
	}
	if j.State == "" {
		j.State = journalBranch
	}
	j.GitBranch, j.GitCommit = res.Branch, res.Commit
	j.Touched = append(j.Touched, ours...)
	if err := s.dir.saveJournal(j, s.env); err != nil {
		return res, fmt.Errorf("the commit %s was made on %q, but recording it failed: %w (run the same command again to record it)", res.Commit, name, err)
	}
	return res, nil
}

// gitCmd runs git in the workspace, as the owner of its repository.
type gitCmd struct {
	dir   string
	owner *syscall.Credential // nil: as this process
	home  string              // the owner's home directory, when owner is set
}

// newGitCmd runs git in dir. When this process is root and the
// repository (dir/.git, else dir) belongs to another user, git runs as
// that user, with their home directory: the objects and ref it writes are
// theirs, as if they had run git themselves (root-owned files in a user's
// repository break their later git commands), git's refusal of a
// repository of another owner does not apply, and anything the
// repository's own configuration runs, runs as its owner, never as root.
func newGitCmd(dir string) gitCmd {
	g := gitCmd{dir: dir}
	fi, err := os.Lstat(filepath.Join(dir, ".git"))
	if err != nil {
		fi, err = os.Lstat(dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if err != nil || !ok || os.Geteuid() != 0 || st.Uid == 0 {
		return g
	}
	g.owner = &syscall.Credential{Uid: st.Uid, Gid: st.Gid, NoSetGroups: true}
	g.home = "/nonexistent"
	if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil && u.HomeDir != "" {
		g.home = u.HomeDir
	}
	return g
}

// command is git with args in the workspace, as its owner.
func (g gitCmd) command(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	if g.owner != nil {
		cmd.Env = append(cmd.Env, "HOME="+g.home)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: g.owner}
	}
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// give hands the files beneath dir, which this process made for git to
// read, to the user git runs as.
func (g gitCmd) give(dir string) error {
	if g.owner == nil {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			err = os.Lchown(p, int(g.owner.Uid), int(g.owner.Gid))
		}
		return err
	})
}

// out runs git with args (stdin from in, when not nil) and returns its
// output without the trailing newline; a failure's error holds git's
// message.
func (g gitCmd) out(in io.Reader, args ...string) (string, error) {
	cmd := g.command(nil, args...)
	cmd.Stdin = in
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return "", fmt.Errorf("git %s: %s", args[0], msg)
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// check refuses, with ErrGitBranch, what ApplyToGitBranch must not write
// into: no repository at the workspace's top, a bad branch name, no HEAD
// recorded at launch, a detached HEAD that moved, staged changes.
func (g gitCmd) check(name string, launch *gitHead) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("git is not installed: %w", ErrGitBranch)
	}
	top, err := g.out(nil, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("the workspace %q is not a git repository: %w", g.dir, ErrGitBranch)
	}
	if evalOrSelf(top) != evalOrSelf(g.dir) {
		return fmt.Errorf("the workspace %q lies inside the git repository %q, not at its top: %w", g.dir, top, ErrGitBranch)
	}
	if _, err := g.out(nil, "check-ref-format", "--branch", name); err != nil || strings.HasPrefix(name, "-") {
		return fmt.Errorf("%q is not a valid branch name: %w", name, ErrGitBranch)
	}
	if launch == nil {
		return fmt.Errorf("the session did not record the repository's HEAD at launch (no commit yet, or a work tree whose .git is a file): %w", ErrGitBranch)
	}
	if _, err := g.out(nil, "cat-file", "-e", launch.Commit+"^{commit}"); err != nil {
		return fmt.Errorf("the commit %s that HEAD named at launch is no longer in the repository: %w", launch.Commit, ErrGitBranch)
	}
	if launch.Ref == "" {
		now, _ := g.out(nil, "rev-parse", "-q", "--verify", "HEAD")
		if _, err := g.out(nil, "symbolic-ref", "-q", "HEAD"); err != nil && now != launch.Commit {
			return fmt.Errorf("HEAD is detached and moved since the launch (%s then, %s now): check out %s first, or commit the change set by hand: %w", launch.Commit, now, launch.Commit, ErrGitBranch)
		}
	}
	if _, err := g.out(nil, "diff-index", "--cached", "--quiet", "HEAD", "--"); err != nil {
		return fmt.Errorf("the repository's index holds staged changes (`git diff --cached` shows them): commit or unstage them first: %w", ErrGitBranch)
	}
	return nil
}

// ignored returns which of paths git ignores (`git check-ignore`) under
// the ignore rules of the change set's merged view: `git check-ignore`
// runs over a scratch work tree holding only the .gitignore files git
// tracks in the workspace and those the change set adds or changes (read
// beneath ws and the upper layer, no symlink followed), less those it
// deletes, with the repository's own exclude files as they are.
func (g gitCmd) ignored(paths []string, ws *os.File, upperDir string, entries []attest.Entry) (map[string]bool, error) {
	out := make(map[string]bool)
	// A path git tracks is never ignored: only the others are asked about.
	all, err := g.out(nil, "ls-files", "-z")
	if err != nil {
		return nil, err
	}
	tracked := make(map[string]bool)
	for _, p := range strings.Split(all, "\x00") {
		tracked[p] = true
	}
	paths = slices.DeleteFunc(slices.Clone(paths), func(p string) bool { return tracked[p] })
	if len(paths) == 0 {
		return out, nil
	}
	tree, err := os.MkdirTemp("", "layerseal-ignore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tree)

	changed := make(map[attest.Path]*attest.Entry)
	for i := range entries {
		if path.Base(string(entries[i].Path)) == ".gitignore" {
			changed[entries[i].Path] = &entries[i]
		}
	}
	upper, err := linux.Openat(unix.AT_FDCWD, upperDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer linux.Close(upper)
	put := func(p attest.Path, from int) {
		b, err := readBeneath(from, p, 64<<10)
		if err != nil {
			return // not a regular file there: no rules
		}
		full := filepath.Join(tree, string(p))
		if os.MkdirAll(filepath.Dir(full), 0o700) == nil {
			os.WriteFile(full, b, 0o600)
		}
	}
	for p := range tracked {
		if path.Base(p) == ".gitignore" && changed[attest.Path(p)] == nil {
			put(attest.Path(p), int(ws.Fd()))
		}
	}
	for p, e := range changed {
		if e.New != nil && e.New.Type == attest.File {
			put(p, upper)
		}
	}
	var in bytes.Buffer
	for _, p := range paths {
		in.WriteString(p)
		in.WriteByte(0)
	}
	if err := g.give(tree); err != nil {
		return nil, err
	}
	cmd := g.command([]string{"GIT_DIR=" + filepath.Join(g.dir, ".git"), "GIT_WORK_TREE=" + tree}, "check-ignore", "-z", "--stdin")
	cmd.Dir, cmd.Stdin = tree, &in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) { // 1: none ignored
		return nil, fmt.Errorf("git check-ignore: %s", strings.TrimSpace(stderr.String()))
	}
	for _, p := range bytes.Split(stdout.Bytes(), []byte{0}) {
		if len(p) > 0 {
			out[string(p)] = true
		}
	}
	return out, nil
}

// fastImport makes the commit with `git fast-import`: "M" with inline
// data for each regular file (read beneath upper, no symlink followed,
// checked against the statement's digest) and symlink, "D" for each
// path removed, from parent onto the new ref. The stream ends in "done":
// a stream cut short (a file that does not match, an error) writes no
// ref.
func (g gitCmd) fastImport(ref, parent, msg string, pre []string, upper int, entries []attest.Entry) error {
	ident, err := g.out(nil, "var", "GIT_COMMITTER_IDENT")
	if err != nil {
		return fmt.Errorf("%w (set user.name and user.email in git's config: the repository's own, or its owner's, as git runs as the owner of the repository); %w", err, ErrGitBranch)
	}
	// Always a pack: loose objects would land beside the agent's own
	// in .git/objects, where a later apply of the change set puts them.
	cmd := g.command(nil, "-c", "fastimport.unpackLimit=0", "fast-import", "--quiet", "--date-format=raw")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("git fast-import: %w", err)
	}
	w := bufio.NewWriterSize(stdin, 1<<20)
	buf := make([]byte, 256<<10) // one copy buffer for every file
	werr := func() error {
		fmt.Fprintf(w, "feature done\ncommit %s\ncommitter %s\ndata %d\n%s\nfrom %s\n", ref, ident, len(msg), msg, parent)
		for _, l := range pre {
			fmt.Fprintf(w, "%s\n", l)
		}
		for _, e := range entries {
			path := review.Quote(string(e.Path))
			if e.New == nil {
				if e.Old != nil && e.Old.Type != attest.Dir {
					fmt.Fprintf(w, "D %s\n", path)
				}
				continue
			}
			if e.Old != nil && e.Old.Type == attest.Dir && e.New.Type != attest.Dir {
				fmt.Fprintf(w, "D %s\n", path) // its files are listed as deleted too
			}
			switch e.New.Type {
			case attest.Symlink:
				fmt.Fprintf(w, "M 120000 inline %s\ndata %d\n%s\n", path, len(e.New.Target), e.New.Target)
			case attest.File:
				if err := writeBlob(w, upper, e, path, buf); err != nil {
					return err
				}
			case attest.Dir:
				if e.Old != nil && e.Old.Type != attest.Dir {
					fmt.Fprintf(w, "D %s\n", path)
				}
			}
		}
		w.WriteString("\ndone\n")
		return w.Flush()
	}()
	if werr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("%w; %w", werr, ErrGitBranch)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git fast-import: %s: %w", strings.TrimSpace(stderr.String()), ErrGitBranch)
	}
	return nil
}

// writeBlob writes e's file as a fast-import "M" command with inline
// data, streaming it from beneath upper and checking its digest.
func writeBlob(w *bufio.Writer, upper int, e attest.Entry, path string, buf []byte) error {
	if e.New.SHA256 == nil {
		return fmt.Errorf("%q was not hashed (over the digest cap): it cannot be committed as attested", string(e.Path))
	}
	fd, err := linux.OpenBeneath(upper, string(e.Path), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return fmt.Errorf("the change set's %q: %w", string(e.Path), unwrapPath(err))
	}
	f := os.NewFile(uintptr(fd), string(e.Path))
	defer f.Close()
	mode := review.GitMode(attest.File, e.New.Mode)
	fmt.Fprintf(w, "M %06o inline %s\ndata %d\n", mode, path, e.New.Size)
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(w, h), io.LimitReader(f, int64(e.New.Size)+1), buf)
	if err != nil {
		return fmt.Errorf("the change set's %q: %w", string(e.Path), err)
	}
	if uint64(n) != e.New.Size || !bytes.Equal(h.Sum(nil), e.New.SHA256) {
		return fmt.Errorf("the change set's %q does not hold what the statement lists", string(e.Path))
	}
	return w.WriteByte('\n')
}
