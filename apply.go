package layerseal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
)

// Errors a caller of Apply, Discard and Staged acts on.
var (
	// ErrAlreadyApplied: the session's change set was applied to the
	// workspace before; nothing was done.
	ErrAlreadyApplied = errors.New("already applied")
	// ErrDiscarded: the session's change set was discarded.
	ErrDiscarded = errors.New("already discarded")
	// ErrInterrupted: an apply of the session stopped part way; discarding
	// now would leave the workspace half applied.
	ErrInterrupted = errors.New("an apply was interrupted part way")
)

// WorkspaceChangedError is returned when paths of the change set were
// changed in the workspace by someone else since the launch (their entry's
// ctime, or their nearest existing directory's for an entry absent there,
// is later than the launch; or they hold neither the state the statement
// found nor the one being applied): applying would overwrite those edits,
// so nothing is applied and the change set stays staged.
// ApplyOptions.ForcePaths overwrites chosen paths, ApplyOptions.Skip
// leaves them out, ApplyOptions.Force overwrites all.
type WorkspaceChangedError struct {
	Out   string // the session's output dir or id, for the message
	Paths []attest.Path
}

func (e *WorkspaceChangedError) Error() string {
	hint := ""
	if slices.Contains(e.Paths, ".git/index") || slices.Contains(e.Paths, ".git") {
		// git rewrites its index on `git status`, through a rename that
		// also moves the .git directory's mtime: a cache of the work
		// tree's stat data, which the agent's index replaces safely.
		hint = " (.git/index and the .git directory's mtime change whenever git runs in the workspace, `git status` included: the agent's can usually be forced)"
	}
	return fmt.Sprintf("the workspace changed since the session started at %s: nothing was applied and the change set stays staged; "+
		"`layerseal apply --force %s PATH...` overwrites those paths, `layerseal apply --skip %s PATH...` leaves them out%s",
		conflictText(e.Paths), e.Out, e.Out, hint)
}

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	// Force applies everything: over every path changed in the workspace
	// since the launch, and violations the sweep could not revert.
	Force bool
	// ForcePaths are changed workspace paths to overwrite all the same
	// (each with the entries beneath it).
	ForcePaths []attest.Path
	// Skip are paths to leave out of the apply (each with the entries
	// beneath it): they stay staged, as the rest of a part chosen with
	// Except does, for a later apply or discard.
	Skip []attest.Path
	// Progress, when set, is called before each step that changes the
	// workspace or the session's journal (see overlay.ApplyOptions).
	Progress func(op string, p attest.Path)
	// Planned, when set, is told how many changes the apply will make,
	// once it has fixed them and before the first step.
	Planned func(changes int)
	// Left, when set, is told each entry an apply of a change set not
	// examined in full leaves as it is, and why (see overlay.ApplyOptions).
	Left func(p attest.Path, why string)
	// Only and Except choose a part of the change set by globs (as in
	// layerseal.yaml, anchored at the workspace root; a glob matching a
	// directory takes what lies beneath it too): the changes Only
	// matches, or all but those Except matches. The rest stays staged
	// for a later apply or discard. See choosePart for what comes along
	// and what is refused.
	Only, Except []string
	// Stop, when set, is asked before each step (see overlay.ApplyOptions):
	// an error from it (an interrupt) stops the apply at that safe point;
	// the apply is journaled, and running it again finishes it.
	Stop func() error
	// LeaveRemoval, once a change set of at least LeaveRemovalMin
	// entries is applied in full, moves the session's upper layer out of
	// it into the state dir's pruning dir rather than removing it: a
	// rename, after the workspace is synced and the journal says applied,
	// so nothing of the change set depends on it any more. The caller
	// then removes it with RemovePruned while the user goes on (removing
	// a large upper layer takes as long as applying it); until then the
	// space stays used there, and Prune also removes it. A smaller upper
	// layer is removed at once, as without LeaveRemoval.
	LeaveRemoval bool
}

// LeaveRemovalMin is the fewest entries of a change set whose upper layer
// ApplyOptions.LeaveRemoval leaves for later: below it, removal takes a
// fraction of a second, not worth a process of its own.
const LeaveRemovalMin = 2000

// Journal states, kept in the session's state dir (journalFile).
const (
	journalApplying  = "applying"
	journalApplied   = "applied"
	journalDiscarded = "discarded"
	// journalPartial: parts of the change set were applied or
	// discarded (journal.Applied, journal.Discarded); the rest is staged.
	journalPartial = "partial"
	// journalBranch: Store.ApplyToGitBranch wrote the change set to a
	// git branch (journal.GitBranch); the workspace is as it was and the
	// change set stays staged.
	journalBranch = "branch"
	journalFile   = "journal.json"
)

// journal records where the apply of one session stands. It is written
// atomically and synced before the step it announces.
type journal struct {
	State     string    `json:"state"`
	Statement string    `json:"statement_sha256"`
	Time      time.Time `json:"time"`
	// Skipped are the paths left out of the apply (ApplyOptions.Skip),
	// with the entries beneath them: the session is partly applied.
	Skipped []attest.Path `json:"skipped,omitempty"`
	// Applied and Discarded are the entry paths that applies and discards
	// of a part (ApplyOptions.Only, Except; DiscardPart) settled; the
	// rest stays staged. While an apply of a part runs (State applying),
	// Applied does not hold the part yet: the plan does.
	Applied   []attest.Path `json:"applied,omitempty"`
	Discarded []attest.Path `json:"discarded,omitempty"`
	// Part: the apply in progress applies a part, and leaves the rest
	// staged.
	Part bool `json:"part,omitempty"`
	// Touched are the directories applies of parts wrote into, with
	// their ctime right after: a later part's conflict check knows those
	// changes as the session's own.
	Touched []touched `json:"touched,omitempty"`
	// GitBranch and GitCommit name the commit Store.ApplyToGitBranch
	// wrote the change set to (Applied then lists what it holds).
	GitBranch string `json:"git_branch,omitempty"`
	GitCommit string `json:"git_commit,omitempty"`
}

// touched is a directory an apply of a part wrote into and its ctime
// after that apply.
type touched struct {
	Path    attest.Path `json:"path"`
	CtimeNS int64       `json:"ctime_ns"`
}

func (d sessionDir) journal() string { return filepath.Join(string(d), journalFile) }

func (d sessionDir) readJournal() (*journal, error) {
	b, err := os.ReadFile(d.journal())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("journal %q is damaged: %w", d.journal(), err)
	}
	return &j, nil
}

// saveJournal writes j, stamped with the statement env's digest and the
// time, atomically, and syncs it and the session dir.
func (d sessionDir) saveJournal(j journal, env []byte) error {
	b, err := j.stamped(env)
	if err != nil {
		return err
	}
	return atomicfile.WriteFiles([]atomicfile.File{{Path: d.journal(), Data: b, Perm: 0o600}})[0]
}

// stamped is j stamped with the statement env's digest and the time, as
// the journal file holds it.
func (j journal) stamped(env []byte) ([]byte, error) {
	j.Statement, j.Time = fmt.Sprintf("%x", sha(env)), time.Now().UTC()
	return json.Marshal(j)
}

// planFile holds the entries an apply in progress applies (private to the
// root-only state dir).
const planFile = "apply-plan.json"

func (d sessionDir) writePlan(entries []attest.Entry) error {
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(string(d), planFile), b, 0o600)
}

func (d sessionDir) readPlan() ([]attest.Entry, error) {
	b, err := os.ReadFile(filepath.Join(string(d), planFile))
	if err != nil {
		return nil, fmt.Errorf("the interrupted apply's plan: %w", err)
	}
	var entries []attest.Entry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, fmt.Errorf("the interrupted apply's plan %q is damaged: %w", filepath.Join(string(d), planFile), err)
	}
	return entries, nil
}

// closed returns the error for a session whose journal says it is done.
func closed(j *journal, id string) error {
	switch {
	case j == nil:
		return nil
	case j.State == journalApplied:
		return fmt.Errorf("session %s: %w (at %s)", id, ErrAlreadyApplied, j.Time.Format(time.RFC3339))
	case j.State == journalDiscarded:
		return fmt.Errorf("session %s: %w (at %s)", id, ErrDiscarded, j.Time.Format(time.RFC3339))
	}
	return nil
}

// staged is a session found from its output dir, its statement verified
// with the key pinned in its state.
type staged struct {
	dir    sessionDir
	rec    sessionRecord
	env    []byte
	st     *attest.Statement
	launch *attest.LaunchRecord
	j      *journal
	// ws is the workspace root opened and identified before launch, when
	// the session that ran the agent applies; nil for a later apply,
	// which opens it and checks its identity against the launch record.
	ws *os.File
	// r is the session's reader, when the session that ran the agent
	// applies; a later apply makes its own if it needs one.
	r *reader
	// excluded are the entries of the excluded subtrees, when the
	// session that ran the agent read them already (its sweep did).
	excluded *subtrees
}

func (store *Store) openStaged(out string) (*staged, error) {
	s := &staged{}
	var err error
	if s.dir, s.rec, err = store.find(out); err != nil {
		return nil, err
	}
	if s.j, err = s.dir.readJournal(); err != nil {
		return nil, err
	}
	if err := closed(s.j, s.rec.ID); err != nil {
		return s, err
	}
	if s.env, err = s.dir.artifact(StatementFile, s.rec.Out); err != nil {
		if store.running(s.rec.ID) {
			return nil, fmt.Errorf("session %s is still running: its change set is staged once it ends", s.rec.ID)
		}
		return nil, fmt.Errorf("session %s has no statement: its supervisor ended before signing one; run `layerseal recover --key KEY %s` first", s.rec.ID, store.CommandRef(s.rec.ID))
	}
	launchEnv, err := s.dir.artifact(LaunchFile, s.rec.Out)
	if err != nil {
		return nil, fmt.Errorf("session %s: no launch record: %w", s.rec.ID, err)
	}
	pub := s.rec.PublicKey
	if s.st, err = attest.VerifyStatement(s.env, pub, launchEnv); err != nil {
		return nil, fmt.Errorf("statement of session %s: %w", s.rec.ID, err)
	}
	if s.launch, err = attest.VerifyLaunch(launchEnv, pub); err != nil {
		return nil, fmt.Errorf("launch record of session %s: %w", s.rec.ID, err)
	}
	if s.st.SessionID != s.rec.ID {
		return nil, fmt.Errorf("the statement found for session %s is of session %s", s.rec.ID, s.st.SessionID)
	}
	return s, nil
}

// artifact reads the session's copy of name in its state dir, or, when
// there is none (the state dir's filesystem was full), the one in its
// output dir.
func (d sessionDir) artifact(name, out string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(string(d), name))
	if errors.Is(err, os.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(out, name))
	}
	return b, err
}

// Staged returns the verified statement of the session whose output dir
// is out while its change set is kept (staged, or an apply that stopped);
// its AppliedEntries and Excluded are what Apply would apply: after
// applies or discards of parts, the statement's lists without the
// entries they settled. It fails with ErrAlreadyApplied or ErrDiscarded
// once the session is closed.
func (store *Store) Staged(out string) (*attest.Statement, error) {
	s, err := store.openStaged(out)
	if err != nil {
		return nil, err
	}
	return s.view(), nil
}

// view is the statement as Staged gives it: without settled entries.
func (s *staged) view() *attest.Statement {
	if len(s.settled()) == 0 {
		return s.st
	}
	st := *s.st
	st.Entries = s.unsettled(st.Entries)
	if st.Applied != nil {
		st.Applied = s.unsettled(st.Applied)
	}
	return &st
}

// Apply applies the change set of the session whose output dir is out:
// the statement's applied entries (after the sweep) plus the contents of
// its excluded subtrees, read again from the upper layer and checked
// against the signed counts. It verifies the statement with the key pinned
// in the session's state; refuses (WorkspaceChangedError) when workspace
// paths no longer hold what the lower layer held at launch, unless
// opt.Force; journals its progress, so after a crash or a full disk
// running it again finishes the job; and refuses a session already
// applied (ErrAlreadyApplied) or discarded. Afterwards the upper layer is
// dropped unless parts of it were not examined; the session's record and
// journal stay so a second apply is refused.
func (store *Store) Apply(out string, opt ApplyOptions) (*attest.Statement, error) {
	s, err := store.openStaged(out)
	if err != nil {
		return nil, err
	}
	lock, err := s.lock(store)
	if err != nil {
		return s.st, err
	}
	defer lock.release()
	if _, err := os.Lstat(s.dir.record()); err != nil {
		// Prune removed it between our reading it and the lock, which
		// it checks under the same guard.
		return s.st, fmt.Errorf("session %s was pruned from the state dir meanwhile: nothing was applied", s.rec.ID)
	}
	if b := blocked(s.st); len(b) > 0 && !opt.Force {
		return s.st, fmt.Errorf("the sweep could not revert %s: apply with --force to apply them anyway", strings.Join(b, ", "))
	}
	st := s.view() // what is still staged: what this apply may apply
	return st, s.apply(out, opt)
}

// lock takes the lock of the session's workspace for an apply, so no run
// and no other apply changes it meanwhile.
func (s *staged) lock(store *Store) (*workspaceLock, error) {
	st, err := linux.Lstat(unix.AT_FDCWD, s.rec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", s.rec.Workspace, err)
	}
	return store.lockWorkspace(s.rec.Workspace, st, s.rec.ID)
}

func (s *staged) apply(out string, opt ApplyOptions) error {
	progress := opt.Progress
	if progress == nil {
		progress = func(string, attest.Path) {}
	}
	if lowerMoved(s.st.Incomplete) {
		return fmt.Errorf("%w (the statement says so); nothing was applied; the change set is kept in %s: `layerseal discard %s` drops it", ErrWorkspaceMoved, s.dir, out)
	}
	ws := s.ws
	if ws == nil {
		var err error
		if ws, err = openWorkspace(s.rec.Workspace, s.launch.Lower); err != nil {
			return fmt.Errorf("%w; nothing was applied; the change set is kept in %s: `layerseal discard %s` drops it", err, s.dir, out)
		}
		defer ws.Close()
	}
	resuming := s.j != nil && s.j.State == journalApplying
	// The entry set is fixed when the apply starts: re-reading the
	// excluded subtrees against a half-applied workspace would give
	// another one.
	var entries []attest.Entry
	var skipped []attest.Path
	var err error
	part := false
	if resuming {
		part = s.j.Part
		if len(opt.Skip) > 0 {
			return fmt.Errorf("an apply of this session stopped part way; run `layerseal apply %s` without --skip to finish it", out)
		}
		skipped = s.j.Skipped
		entries, err = s.dir.readPlan()
	} else {
		entries, err = s.entries(ws)
		if err == nil {
			err = inChangeSet(entries, append(append([]attest.Path(nil), opt.Skip...), opt.ForcePaths...))
		}
		if err == nil {
			entries = s.unsettled(entries)
		}
		if err == nil && len(opt.Skip) > 0 {
			// What is skipped stays staged, as a part --except leaves.
			entries, err = leaveOut(entries, opt.Skip)
			skipped, part = opt.Skip, true
		}
		if err == nil && (len(opt.Only) > 0 || len(opt.Except) > 0) {
			var rest []attest.Entry
			entries, rest, err = choosePart(entries, opt.Only, opt.Except, true)
			part = len(rest) > 0
		}
	}
	if err != nil {
		return err
	}
	if opt.Planned != nil {
		opt.Planned(len(entries))
	}
	if !opt.Force {
		changed := workspaceChanged(ws, entries, resuming)
		if !resuming {
			// Our own writes of an interrupted apply are after the launch
			// too: a resumed apply relies on the comparison above.
			paths := make([]attest.Path, len(entries))
			for i, e := range entries {
				paths[i] = e.Path
			}
			changed = union(changed, conflictsBut(ws, paths, launchedAt(s.rec, s.launch), s.ours()))
		}
		changed = slices.DeleteFunc(changed, func(p attest.Path) bool { return underAny(p, opt.ForcePaths) })
		if len(changed) > 0 {
			return &WorkspaceChangedError{Out: out, Paths: changed}
		}
	}
	var prev journal
	if s.j != nil {
		prev = *s.j
	}
	// An empty entry set changes nothing in the workspace: it needs no
	// plan, no journal of an apply in progress and no sync of the
	// workspace's filesystem, only the journal that says it is done.
	if len(entries) > 0 || resuming {
		if !resuming {
			progress("journal-applying", attest.Root)
			if err := s.dir.writePlan(entries); err != nil {
				return fmt.Errorf("%w; nothing was applied; the change set is kept in %s: free space there, then run `layerseal apply %s`", err, s.dir, out)
			}
			j := prev
			j.State, j.Skipped, j.Part = journalApplying, skipped, part
			if err := s.dir.saveJournal(j, s.env); err != nil {
				return fmt.Errorf("%w; nothing was applied; the change set is kept in %s: free space there, then run `layerseal apply %s`", err, s.dir, out)
			}
		}
		stopped := false
		stop := func() error { return nil }
		if opt.Stop != nil {
			stop = func() error {
				err := opt.Stop()
				stopped = err != nil
				return err
			}
		}
		err = overlay.Apply(s.dir.upper(), s.rec.Workspace, entries, overlay.ApplyOptions{Progress: progress, Stop: stop,
			Workspace: ws, Partial: unexamined(s.st.Incomplete) || part, Left: opt.Left, Resume: resuming})
		if stopped {
			return fmt.Errorf("the apply stopped part way (%w); the workspace is partly changed and the apply is journaled: run `layerseal apply %s` to finish it", errors.Unwrap(err), s.rec.ID)
		}
		if err != nil {
			hint := ""
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				hint = " (the workspace's filesystem is full: free space first)"
			}
			return fmt.Errorf("%w%s; the change set is kept in %s: run `layerseal apply %s` to finish", err, hint, s.dir, out)
		}
	}
	progress("journal-applied", attest.Root)
	j := prev
	j.State, j.Skipped, j.Part = journalApplied, skipped, false
	for _, e := range entries {
		j.Applied = append(j.Applied, e.Path)
	}
	if part {
		j.State, j.Touched = journalPartial, append(j.Touched, touchedBy(ws, entries)...)
	}
	if err := s.dir.saveJournal(j, s.env); err != nil {
		return fmt.Errorf("the change set was applied, but recording it failed: %w", err)
	}
	if part {
		return nil // the rest stays staged
	}
	if unexamined(s.st.Incomplete) || len(skipped) > 0 {
		return nil // what was not applied stays in the upper layer
	}
	if opt.LeaveRemoval && len(s.st.Entries) >= LeaveRemovalMin {
		return s.dir.retireLayers()
	}
	return s.dir.dropLayers()
}

// inChangeSet checks that every path is the path of an entry or a
// directory above one.
func inChangeSet(entries []attest.Entry, paths []attest.Path) error {
	for _, p := range paths {
		if p.Valid() != nil && p != attest.Root {
			return fmt.Errorf("path %q: want a path relative to the workspace, as `layerseal diff` prints it", string(p))
		}
		if !slices.ContainsFunc(entries, func(e attest.Entry) bool { return attest.Within(e.Path, p) }) {
			return fmt.Errorf("path %q is not in the change set (`layerseal diff` lists it)", string(p))
		}
	}
	return nil
}

// leaveOut drops the entries at or beneath the skipped paths. An entry
// left in that is a hard link of one left out cannot be applied alone.
func leaveOut(entries []attest.Entry, skip []attest.Path) ([]attest.Entry, error) {
	if len(skip) == 0 {
		return entries, nil
	}
	out := slices.DeleteFunc(slices.Clone(entries), func(e attest.Entry) bool { return underAny(e.Path, skip) })
	for _, e := range out {
		if e.New != nil && e.New.Link != "" && underAny(e.New.Link, skip) {
			return nil, fmt.Errorf("%q is a hard link of %q, which --skip leaves out: skip both or neither", string(e.Path), string(e.New.Link))
		}
	}
	return out, nil
}

// underAny reports whether p is one of dirs or beneath one.
func underAny(p attest.Path, dirs []attest.Path) bool {
	return slices.ContainsFunc(dirs, func(d attest.Path) bool { return attest.Within(p, d) })
}

// union merges two sorted path lists.
func union(a, b []attest.Path) []attest.Path {
	out := append(append([]attest.Path(nil), a...), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// entries merges the statement's applied entries with the entries of its
// excluded subtrees: those the session's sweep read, or, when it did not
// read them, read again from the upper layer: by a later apply after
// checking that they still hold what the statement counted; by the
// session that ran the agent without that check, as the statement was
// just read from the same layer, which no one else writes.
func (s *staged) entries(ws *os.File) ([]attest.Entry, error) {
	applied := s.st.AppliedEntries()
	if len(s.st.Excluded) == 0 {
		return applied, nil
	}
	var excluded []attest.Entry
	var err error
	switch {
	case s.excluded != nil:
		excluded = s.excluded.entries
	case s.r != nil:
		_, excluded, err = s.r.reread(s.st)
	default:
		var r *reader
		if r, err = sessionReader(s.dir, s.rec.Workspace, ws, s.launch.Policy); err == nil {
			excluded, err = r.excludedEntries(s.st)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read the excluded subtrees: %w", err)
	}
	out := append([]attest.Entry(nil), applied...)
	listed := make(map[attest.Path]bool, len(applied))
	for _, e := range applied {
		listed[e.Path] = true
	}
	for _, e := range excluded {
		if !listed[e.Path] { // itemized in the statement (and swept) already
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b attest.Entry) int { return strings.Compare(string(a.Path), string(b.Path)) })
	return out, nil
}

// workspaceChanged lists the entries whose workspace path holds neither
// the lower layer's state at launch (Old; absent for Added) nor the state
// being applied (New; absent for Deleted), which a resumed apply may
// already have put there. Files are compared by type, mode, owner, size
// and mtime (and symlink target), directories by type, mode and owner —
// by type only when resuming, as an interrupted apply leaves directories
// it made without their final metadata (and paths it removed before
// making them again absent).
func workspaceChanged(ws *os.File, entries []attest.Entry, resuming bool) []attest.Path {
	root, err := linux.OpenBeneath(int(ws.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return []attest.Path{attest.Root}
	}
	defer linux.Close(root)
	var out []attest.Path
	gone := map[attest.Path]bool{} // absent paths: all beneath them is absent
	for _, e := range entries {
		var now *attest.State
		ok := false
		if e.Path == attest.Root || !gone[parentPath(e.Path)] {
			now, ok = workspaceState(root, e.Path)
		}
		if !ok {
			gone[e.Path] = true
		}
		if resuming && (!ok || now.Type == attest.Dir && e.New != nil && e.New.Type == attest.Dir) {
			continue
		}
		if !matches(now, ok, e.Old) && !matches(now, ok, e.New) {
			out = append(out, e.Path)
		}
	}
	return out
}

func matches(now *attest.State, ok bool, want *attest.State) bool {
	if !ok || want == nil {
		return !ok && want == nil
	}
	if now.Type != want.Type || now.Mode != want.Mode || now.UID != want.UID || now.GID != want.GID {
		return false
	}
	switch now.Type {
	case attest.File:
		return now.Size == want.Size && now.MtimeNS == want.MtimeNS
	case attest.Symlink:
		return now.Target == want.Target
	case attest.CharDev, attest.BlockDev:
		return now.Rdev == want.Rdev
	}
	return true
}

// workspaceState stats p in the workspace without following symlinks in
// any component; ok is false when p is absent.
func workspaceState(root int, p attest.Path) (*attest.State, bool) {
	dir, name := root, "."
	if p != attest.Root {
		parent, base := filepath.Split(string(p))
		name = base
		if parent != "" {
			fd, err := linux.OpenBeneath(root, strings.TrimSuffix(parent, "/"), unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				return nil, false
			}
			defer linux.Close(fd)
			dir = fd
		}
	}
	var st linux.Stat
	var err error
	if name == "." {
		st, err = linux.Lstat(dir, "")
	} else {
		st, err = linux.Lstat(dir, name)
	}
	if err != nil {
		return nil, false
	}
	s := &attest.State{Mode: st.Mode & 0o7777, UID: st.UID, GID: st.GID, MtimeNS: st.MtimeNS}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		s.Type = attest.Dir
	case unix.S_IFREG:
		s.Type, s.Size = attest.File, st.Size
	case unix.S_IFLNK:
		s.Type = attest.Symlink
		t, err := linux.Readlinkat(dir, name)
		if err != nil {
			return nil, false
		}
		s.Target = attest.Path(t)
	case unix.S_IFCHR:
		s.Type, s.Rdev = attest.CharDev, st.Rdev
	case unix.S_IFBLK:
		s.Type, s.Rdev = attest.BlockDev, st.Rdev
	case unix.S_IFIFO:
		s.Type = attest.FIFO
	default:
		s.Type = attest.Socket
	}
	return s, true
}

// Discard drops the staged change set of the session whose output dir is
// out: the upper layer is removed and the journal records it, so a later
// apply is refused. It refuses a session already applied or discarded,
// and one whose apply stopped part way (ErrInterrupted) unless force.
func (s *Store) Discard(out string, force bool) error {
	dir, rec, err := s.find(out)
	if err != nil {
		return err
	}
	j, err := dir.readJournal()
	if err != nil {
		return err
	}
	if err := closed(j, rec.ID); err != nil {
		return err
	}
	if s.running(rec.ID) {
		return fmt.Errorf("session %s is still running: discard it once it ends", rec.ID)
	}
	if j != nil && j.State == journalApplying && !force {
		return fmt.Errorf("session %s: %w; run `layerseal apply %s` to finish it (or discard --force to leave the workspace as it is)", rec.ID, ErrInterrupted, rec.ID)
	}
	env, _ := os.ReadFile(filepath.Join(string(dir), StatementFile))
	nj := journal{State: journalDiscarded}
	if j != nil {
		nj.Applied, nj.Discarded = j.Applied, j.Discarded
		nj.GitBranch, nj.GitCommit = j.GitBranch, j.GitCommit
	}
	if j != nil && j.State == journalPartial {
		// The rest of a partly applied session: what is still staged is
		// discarded, and the session stays applied in part.
		if sg, err := s.openStaged(out); err == nil {
			for _, e := range sg.unsettled(sg.st.AppliedEntries()) {
				nj.Discarded = append(nj.Discarded, e.Path)
			}
		}
		if len(j.Applied) > 0 {
			nj.State = journalApplied
		}
	}
	if err := dir.saveJournal(nj, env); err != nil {
		return err
	}
	return dir.dropLayers()
}
