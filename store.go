package layerseal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/removetree"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/probe"
)

// DefaultStateDir holds the upper layers of sessions; it must be on a
// filesystem that can hold an overlay upper layer and be reachable by root
// only.
const DefaultStateDir = "/var/lib/layerseal"

// Names of the files a session writes to its output directory (attest
// defines them, so a verifier finds them with no Linux code).
const (
	LaunchFile    = attest.LaunchFile
	StatementFile = attest.StatementFile
)

// Store is a state dir: the one owner of its layout, its locks and the
// records of its sessions. Its methods are the session lifecycle after a
// run: Sessions and Session list them, Staged, Apply and Discard settle a
// change set, Recover signs one whose supervisor died, RequestCheckpoint
// asks a running one for a checkpoint, and Prune removes finished ones.
//
// The layout, all root's and 0700:
//
//	DIR/sessions/ID/session.json  the session's record (sessionRecord)
//	DIR/sessions/ID/upper, work   its overlay layers
//	DIR/sessions/ID/...           launch record, statement, journal, apply plan,
//	                              control socket, spilled checkpoint changes
//	DIR/locks/*.lock              one flock'ed file per workspace in use
//	DIR/locks/.guard              flock'ed while the locks are listed or taken
//	DIR/pruning/ID                a session being removed by Prune
//	DIR/pruning/ID.layers         an applied session's upper layer and work
//	                              dir, left for RemovePruned (see
//	                              ApplyOptions.LeaveRemoval)
//	DIR/kernel-features.json      the overlay trial mounts' findings for
//	                              this boot (probe.DetectCached), 0600
//
// A session is named by its id or by its output dir (the newest session
// written there).
type Store struct {
	dir string
}

// OpenStore returns the store of the state dir dir (DefaultStateDir when
// empty). It touches nothing: a state dir no session ran with yet is
// created by the first run.
func OpenStore(dir string) *Store {
	if dir == "" {
		dir = DefaultStateDir
	}
	return &Store{dir: absOrSelf(dir)}
}

// Dir is the store's state dir, absolute.
func (s *Store) Dir() string { return s.dir }

// CommandRef is how a layerseal command line the tool suggests names the
// session ref (an id or an output dir) of this store, quoted for a POSIX
// shell: with --state-dir when the store is not the default one, so that
// the line works when copied, from any directory.
func (s *Store) CommandRef(ref string) string {
	if s.dir != DefaultStateDir {
		return "--state-dir " + shellWord(s.dir) + " " + shellWord(ref)
	}
	return shellWord(ref)
}

// shellWord quotes s for a POSIX shell when it holds anything but
// letters, digits and -_./,:=+@%.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sessionRecord is kept in the session's state directory so that a later
// command can find the session's upper layer and key from its output dir.
type sessionRecord struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Out       string `json:"out"`
	// PublicKey is the key the session was launched with, of any
	// algorithm: base64 of its encoding (attest.PublicKey.MarshalText).
	PublicKey attest.PublicKey `json:"public_key"`
	// Launched is when the agent could first see the workspace, read on
	// the clock file times are stamped with (linux.CoarseNow), in
	// nanoseconds: a workspace entry with a later ctime was changed by
	// someone else during or after the run (a conflict).
	Launched int64 `json:"launched_ns"`
	// Started is when the session began (the supervisor's clock): an
	// output dir names its newest session.
	Started time.Time `json:"started"`
	// GitHead is the HEAD of the git repository the workspace is, read
	// before the agent started (nil when it is none): the parent of a
	// commit Store.ApplyToGitBranch makes.
	GitHead *gitHead `json:"git_head,omitempty"`
}

// sessionDir is where one session keeps its overlay layers.
type sessionDir string

func (d sessionDir) upper() string  { return filepath.Join(string(d), "upper") }
func (d sessionDir) work() string   { return filepath.Join(string(d), "work") }
func (d sessionDir) record() string { return filepath.Join(string(d), "session.json") }

// dropLayers removes the session's upper layer and overlay work dir, with
// several unlinks in flight (see removetree): a large change set's upper
// layer is otherwise much of an apply's time.
func (d sessionDir) dropLayers() error {
	return errors.Join(removetree.RemoveAll(d.upper()), removetree.RemoveAll(d.work()))
}

// retireLayers moves the session's upper layer and overlay work dir into
// the state dir's pruning dir, as ID.layers, where RemovePruned (or the
// next Prune) removes them: two renames, however large the upper layer.
// Whatever it cannot move (another filesystem, a name already taken) it
// removes at once, as dropLayers does.
func (d sessionDir) retireLayers() error {
	to := retiredPath(d.stateDir(), filepath.Base(string(d)))
	err := os.MkdirAll(to, 0o700)
	for _, p := range []string{d.upper(), d.work()} {
		if err == nil {
			err = os.Rename(p, filepath.Join(to, filepath.Base(p)))
		}
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return d.dropLayers()
	}
	return nil
}

// retiredPath is where retireLayers moves session id's layers in the
// state dir dir.
func retiredPath(dir, id string) string { return filepath.Join(dir, pruningDir, id+".layers") }

// Retired returns where an apply with LeaveRemoval left session id's
// upper layer for RemovePruned, or "" when it left none there.
func (s *Store) Retired(id string) string {
	p := retiredPath(s.dir, id)
	if _, err := os.Lstat(p); err != nil {
		return ""
	}
	return p
}

// Pruning returns the state dir's pruning dir when it holds something
// RemovePruned would remove, else "".
func (s *Store) Pruning() string {
	dir := filepath.Join(s.dir, pruningDir)
	if !holds(dir) {
		return ""
	}
	return dir
}

// RemovePruned removes what the state dir's pruning dir holds: the
// layers applies left there (ApplyOptions.LeaveRemoval) and whatever an
// interrupted Prune left. It is safe to run beside any other command;
// `layerseal apply` runs it in the background.
func (s *Store) RemovePruned() error {
	left, err := filepath.Glob(filepath.Join(s.dir, pruningDir, "*"))
	for _, p := range left {
		if rerr := removetree.RemoveAll(p); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove %q: %w", p, rerr))
		}
	}
	return err
}

// stateDir is the state dir holding d (DIR of DIR/sessions/ID).
func (d sessionDir) stateDir() string { return filepath.Dir(filepath.Dir(string(d))) }

// detectFeatures finds what the kernel offers, the overlay trial mounts
// remembered for the rest of the boot in the state dir stateDir (see
// probe.DetectCached).
func detectFeatures(stateDir string) (probe.Features, error) {
	return probe.DetectCached(filepath.Join(stateDir, probe.CacheFile))
}

func (s *Store) session(id string) sessionDir {
	return sessionDir(filepath.Join(s.dir, "sessions", id))
}

// create makes the session's directories (0700, root) and checks that
// their filesystem can hold an upper layer: whiteouts (char 0:0) and
// trusted xattrs.
func (s *Store) create(id string) (sessionDir, error) {
	if err := os.MkdirAll(filepath.Join(s.dir, "sessions"), 0o700); err != nil {
		return "", fmt.Errorf("state dir %q: %w", s.dir, err)
	}
	d := s.session(id)
	for _, p := range []string{string(d), d.upper(), d.work()} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return "", fmt.Errorf("state dir %q: %w", s.dir, err)
		}
	}
	if err := overlay.CheckUpperDir(string(d)); err != nil {
		os.RemoveAll(string(d))
		return "", fmt.Errorf("state dir %q is on a filesystem that cannot hold an overlay upper layer: %w", s.dir, err)
	}
	return d, nil
}

func (d sessionDir) writeRecord(r sessionRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(d.record(), b, 0o600)
}

// records reads the record of every session of the store, in no order.
// A state dir that does not exist holds none. A record that cannot be
// read (damaged, or written by a layerseal whose formats differ) is
// returned in bad, never dropped silently and never in the way of the
// other sessions.
func (s *Store) records() (dirs []sessionDir, recs []sessionRecord, bad []unreadable, err error) {
	paths, err := filepath.Glob(filepath.Join(s.dir, "sessions", "*", "session.json"))
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range paths {
		d := sessionDir(filepath.Dir(p))
		r, err := d.readRecord()
		if errors.Is(err, os.ErrNotExist) {
			continue // pruned meanwhile
		}
		if err != nil {
			bad = append(bad, unreadable{d, err})
			continue
		}
		dirs, recs = append(dirs, d), append(recs, r)
	}
	return dirs, recs, bad, nil
}

// unreadable is a session whose record could not be read.
type unreadable struct {
	dir sessionDir
	err error
}

// info describes u for Sessions.
func (u unreadable) info() SessionInfo {
	return SessionInfo{
		ID:    filepath.Base(string(u.dir)),
		State: StateUnreadable,
		Detail: fmt.Sprintf("%v; a layerseal of another version may read it; nothing of it was changed (its upper layer is %q)",
			u.err, filepath.Join(string(u.dir), "upper")),
	}
}

// find finds a session by ref: a session id (32 hex digits) with state
// here, or an output dir, which names the newest session written there
// (by start time), so reusing an output dir never reaches the older
// session.
func (s *Store) find(ref string) (sessionDir, sessionRecord, error) {
	if isSessionID(ref) {
		d := s.session(ref)
		if _, err := os.Lstat(d.record()); err == nil {
			r, err := d.readRecord()
			return d, r, err
		}
	}
	out := evalOrSelf(absOrSelf(ref))
	dirs, recs, bad, err := s.records()
	if err != nil {
		return "", sessionRecord{}, err
	}
	var best sessionDir
	var bestRec sessionRecord
	for i, r := range recs {
		if r.Out != out {
			continue
		}
		if best == "" || r.Started.After(bestRec.Started) || r.Started.Equal(bestRec.Started) && r.ID > bestRec.ID {
			best, bestRec = dirs[i], r
		}
	}
	if best == "" {
		hint := "give an output dir or a session id (`layerseal sessions` lists them)"
		if _, err := os.Lstat(filepath.Join(out, LaunchFile)); err == nil {
			hint = fmt.Sprintf("%q holds a session's output (%s), but this state dir has no record of that session: if it ran with --state-dir, give the same --state-dir here", ref, LaunchFile)
		}
		if _, err := os.Stat(s.dir); err != nil {
			return "", sessionRecord{}, fmt.Errorf("no session %q: the state dir %q: %w; %s", ref, s.dir, unwrapPath(err), hint)
		}
		if len(bad) > 0 {
			hint += fmt.Sprintf("; %d session record(s) there could not be read, and `layerseal sessions` lists them too", len(bad))
		}
		return "", sessionRecord{}, fmt.Errorf("no session %q in the state dir %q: %s", ref, s.dir, hint)
	}
	return best, bestRec, nil
}

// readRecord reads and checks the session's record: the one reader of
// session records.
func (d sessionDir) readRecord() (sessionRecord, error) {
	var r sessionRecord
	b, err := os.ReadFile(d.record())
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("session record %q is damaged: %w", d.record(), err)
	}
	if filepath.Base(string(d)) != r.ID || r.PublicKey.IsZero() {
		return r, fmt.Errorf("session record %q is damaged", d.record())
	}
	return r, nil
}

// isSessionID reports whether s has the form of a session id.
func isSessionID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// guard takes the state dir's short-lived lock under which workspace
// locks are listed and taken and sessions are pruned; closing the file
// frees it.
func (s *Store) guard() (*os.File, error) {
	dir := filepath.Join(s.dir, locksDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %q: %w", s.dir, unwrapPath(err))
	}
	g, err := os.OpenFile(filepath.Join(dir, ".guard"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state dir %q: %w", s.dir, unwrapPath(err))
	}
	if err := linux.Flock(int(g.Fd()), unix.LOCK_EX); err != nil {
		g.Close()
		return nil, fmt.Errorf("lock the state dir %q: %w", s.dir, err)
	}
	return g, nil
}
