package layerseal

import (
	"crypto/ed25519"
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

// WorkspaceChangedError is returned when paths of the workspace no longer
// hold what the statement found in the lower layer at launch (someone
// edited the real workspace meanwhile): applying would overwrite their
// edits. ApplyOptions.Force applies all the same.
type WorkspaceChangedError struct {
	Paths []attest.Path
}

func (e *WorkspaceChangedError) Error() string {
	const show = 10
	var b strings.Builder
	for i, p := range e.Paths {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(e.Paths)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconvQuote(p))
	}
	return fmt.Sprintf("the workspace changed since the session started at %s; apply with --force to overwrite", b.String())
}

func strconvQuote(p attest.Path) string { return fmt.Sprintf("%q", string(p)) }

// ApplyOptions tunes Apply.
type ApplyOptions struct {
	StateDir string // DefaultStateDir when empty
	// Force applies even where the workspace changed since the launch.
	Force bool
	// Progress, when set, is called before each step that changes the
	// workspace or the session's journal (see overlay.ApplyOptions).
	Progress func(op string, p attest.Path)
}

// Journal states, kept in the session's state dir (journalFile).
const (
	journalApplying  = "applying"
	journalApplied   = "applied"
	journalDiscarded = "discarded"
	journalFile      = "journal.json"
)

// journal records where the apply of one session stands. It is written
// atomically and synced before the step it announces.
type journal struct {
	State     string    `json:"state"`
	Statement string    `json:"statement_sha256"`
	Time      time.Time `json:"time"`
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

func (d sessionDir) writeJournal(state string, env []byte) error {
	b, err := json.Marshal(journal{State: state, Statement: fmt.Sprintf("%x", sha(env)), Time: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := writeFileAtomic(d.journal(), b, 0o600); err != nil {
		return err
	}
	return syncDir(string(d))
}

// planFile holds the entries an apply in progress applies (private to the
// root-only state dir).
const planFile = "apply-plan.json"

func (d sessionDir) writePlan(entries []attest.Entry) error {
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(string(d), planFile), b, 0o600)
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

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// closed returns the error for a session whose journal says it is done.
func closed(j *journal, out string) error {
	switch {
	case j == nil:
		return nil
	case j.State == journalApplied:
		return fmt.Errorf("session of %q: %w (at %s)", out, ErrAlreadyApplied, j.Time.Format(time.RFC3339))
	case j.State == journalDiscarded:
		return fmt.Errorf("session of %q: %w (at %s)", out, ErrDiscarded, j.Time.Format(time.RFC3339))
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
}

func openStaged(out, stateDir string) (*staged, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	s := &staged{}
	var err error
	if s.dir, s.rec, err = findSession(stateDir, evalOrSelf(absOrSelf(out))); err != nil {
		return nil, err
	}
	if s.j, err = s.dir.readJournal(); err != nil {
		return nil, err
	}
	if err := closed(s.j, out); err != nil {
		return s, err
	}
	if s.env, err = os.ReadFile(filepath.Join(out, StatementFile)); err != nil {
		return nil, fmt.Errorf("output dir %q: %w (if the supervisor was killed, run `layerseal recover %s` first)", out, unwrapPath(err), out)
	}
	launchEnv, err := os.ReadFile(filepath.Join(out, LaunchFile))
	if err != nil {
		return nil, fmt.Errorf("output dir %q: %w", out, unwrapPath(err))
	}
	pub := ed25519.PublicKey(s.rec.PublicKey)
	if s.st, err = attest.VerifyStatement(s.env, pub, launchEnv); err != nil {
		return nil, fmt.Errorf("statement in %q: %w", out, err)
	}
	if s.launch, err = attest.VerifyLaunch(launchEnv, pub); err != nil {
		return nil, fmt.Errorf("launch record in %q: %w", out, err)
	}
	if s.st.SessionID != s.rec.ID {
		return nil, fmt.Errorf("statement in %q is of session %s, but the session state for it is of %s", out, s.st.SessionID, s.rec.ID)
	}
	return s, nil
}

// Staged returns the verified statement of the session whose output dir
// is out while its change set is kept (staged, or an apply that stopped);
// its AppliedEntries and Excluded are what Apply would apply. It fails
// with ErrAlreadyApplied or ErrDiscarded once the session is closed.
func Staged(out, stateDir string) (*attest.Statement, error) {
	s, err := openStaged(out, stateDir)
	if err != nil {
		return nil, err
	}
	return s.st, nil
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
func Apply(out string, opt ApplyOptions) (*attest.Statement, error) {
	s, err := openStaged(out, opt.StateDir)
	if err != nil {
		return nil, err
	}
	lock, err := s.lock()
	if err != nil {
		return s.st, err
	}
	defer lock.release()
	if b := blocked(s.st); len(b) > 0 && !opt.Force {
		return s.st, fmt.Errorf("the sweep could not revert %s: apply with --force to apply them anyway", strings.Join(b, ", "))
	}
	return s.st, s.apply(out, opt)
}

// lock takes the lock of the session's workspace for an apply, so no run
// and no other apply changes it meanwhile.
func (s *staged) lock() (*workspaceLock, error) {
	st, err := linux.Lstat(unix.AT_FDCWD, s.rec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", s.rec.Workspace, err)
	}
	return lockWorkspace(filepath.Dir(filepath.Dir(string(s.dir))), s.rec.Workspace, st, s.rec.ID)
}

func (s *staged) apply(out string, opt ApplyOptions) error {
	progress := opt.Progress
	if progress == nil {
		progress = func(string, attest.Path) {}
	}
	// The entry set is fixed when the apply starts: re-reading the
	// excluded subtrees against a half-applied workspace would give
	// another one.
	var entries []attest.Entry
	var err error
	if s.j != nil && s.j.State == journalApplying {
		entries, err = s.dir.readPlan()
	} else {
		entries, err = s.entries()
	}
	if err != nil {
		return err
	}
	if !opt.Force {
		resuming := s.j != nil && s.j.State == journalApplying
		if changed := workspaceChanged(s.rec.Workspace, entries, resuming); len(changed) > 0 {
			return &WorkspaceChangedError{Paths: changed}
		}
	}
	if s.j == nil {
		progress("journal-applying", attest.Root)
		if err := s.dir.writePlan(entries); err != nil {
			return fmt.Errorf("%w; nothing was applied; the change set is kept in %s: free space there, then run `layerseal apply %s`", err, s.dir, out)
		}
		if err := s.dir.writeJournal(journalApplying, s.env); err != nil {
			return fmt.Errorf("%w; nothing was applied; the change set is kept in %s: free space there, then run `layerseal apply %s`", err, s.dir, out)
		}
	}
	err = overlay.Apply(s.dir.upper(), s.rec.Workspace, entries, overlay.ApplyOptions{Progress: progress})
	if err != nil {
		hint := ""
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			hint = " (the workspace's filesystem is full: free space first)"
		}
		return fmt.Errorf("%w%s; the change set is kept in %s: run `layerseal apply %s` to finish", err, hint, s.dir, out)
	}
	progress("journal-applied", attest.Root)
	if err := s.dir.writeJournal(journalApplied, s.env); err != nil {
		return fmt.Errorf("the change set was applied, but recording it failed: %w", err)
	}
	if unexamined(s.st.Incomplete) {
		return nil
	}
	return errors.Join(os.RemoveAll(s.dir.upper()), os.RemoveAll(s.dir.work()))
}

// entries merges the statement's applied entries with the entries of its
// excluded subtrees, read again from the upper layer (the statement
// commits to their counts, which must still hold).
func (s *staged) entries() ([]attest.Entry, error) {
	applied := s.st.AppliedEntries()
	if len(s.st.Excluded) == 0 {
		return applied, nil
	}
	p := s.launch.Policy
	again, err := Attest(s.dir.upper(), s.dir.work(), s.rec.Workspace, p, false)
	if err != nil {
		return nil, fmt.Errorf("read the excluded subtrees: %w", err)
	}
	if !slices.Equal(again.Excluded, s.st.Excluded) {
		return nil, fmt.Errorf("%w: the excluded subtrees no longer hold the entries the statement counted", overlay.ErrNotAttested)
	}
	p.Exclude = nil
	full, err := Attest(s.dir.upper(), s.dir.work(), s.rec.Workspace, p, false)
	if err != nil {
		return nil, fmt.Errorf("read the excluded subtrees: %w", err)
	}
	out := append([]attest.Entry(nil), applied...)
	for _, e := range full.Entries {
		for _, x := range s.st.Excluded {
			if under(e.Path, x.Path) {
				out = append(out, e)
				break
			}
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
func workspaceChanged(ws string, entries []attest.Entry, resuming bool) []attest.Path {
	root, err := linux.Openat(unix.AT_FDCWD, ws, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return []attest.Path{attest.Root}
	}
	defer unix.Close(root)
	var out []attest.Path
	for _, e := range entries {
		now, ok := workspaceState(root, e.Path)
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
			defer unix.Close(fd)
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
func Discard(out, stateDir string, force bool) error {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	dir, _, err := findSession(stateDir, evalOrSelf(absOrSelf(out)))
	if err != nil {
		return err
	}
	j, err := dir.readJournal()
	if err != nil {
		return err
	}
	if err := closed(j, out); err != nil {
		return err
	}
	if j != nil && j.State == journalApplying && !force {
		return fmt.Errorf("session of %q: %w; run `layerseal apply %s` to finish it (or discard --force to leave the workspace as it is)", out, ErrInterrupted, out)
	}
	env, _ := os.ReadFile(filepath.Join(string(dir), StatementFile))
	if err := dir.writeJournal(journalDiscarded, env); err != nil {
		return err
	}
	return errors.Join(os.RemoveAll(dir.upper()), os.RemoveAll(dir.work()))
}
