package layerseal

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// ErrWorkspaceLocked is wrapped by the error a session or an apply gets
// when another session holds its workspace, a directory inside it or one
// above it. The error names the holder's session id.
var ErrWorkspaceLocked = errors.New("in use by another session")

// locksDir holds one lock file per workspace in use, in the state dir.
const locksDir = "locks"

// lockRecord is the content of a workspace lock file.
type lockRecord struct {
	Session   string `json:"session"`
	Workspace string `json:"workspace"`
	Dev       uint64 `json:"dev"`
	Ino       uint64 `json:"ino"`
	PID       int    `json:"pid"`
}

// workspaceLock is a held lock: its file is flock'ed for as long as the
// descriptor is open, so a holder that dies frees it.
type workspaceLock struct {
	f    *os.File
	path string
}

// lockWorkspace takes the lock of the workspace ws (absolute, symlinks
// resolved) whose root is the directory st, for session id. It refuses
// (ErrWorkspaceLocked, naming the holder) when a live lock is held on ws,
// on a directory inside or above it, or on the same directory under
// another path. Lock files left by holders that died are removed.
//
// Every lock file of the state dir is listed once under a short-lived lock
// of the locks dir itself, so two sessions starting at once on nested
// workspaces cannot both succeed; the cost is one flock attempt per
// workspace in use.
func (s *Store) lockWorkspace(ws string, st linux.Stat, id string) (*workspaceLock, error) {
	guard, err := s.guard()
	if err != nil {
		return nil, err
	}
	defer guard.Close() // frees the guard's lock
	dir := filepath.Join(s.dir, locksDir)
	names, err := filepath.Glob(filepath.Join(dir, "*.lock"))
	if err != nil {
		return nil, err
	}
	for _, p := range names {
		holder, live := readLock(p)
		if !live {
			os.Remove(p) // its holder died
			continue
		}
		same := holder.Dev == st.Dev && holder.Ino == st.Ino
		if same || attest.Within(ws, holder.Workspace) || attest.Within(holder.Workspace, ws) {
			where := ""
			switch {
			case holder.Workspace == ws || same:
			case attest.Within(ws, holder.Workspace):
				where = fmt.Sprintf(" over %q, which holds this workspace", holder.Workspace)
			default:
				where = fmt.Sprintf(" over %q, inside this workspace", holder.Workspace)
			}
			return nil, fmt.Errorf("workspace %q: %w: session %s (process %d)%s; wait for it to end, or see `layerseal sessions`",
				ws, ErrWorkspaceLocked, holder.Session, holder.PID, where)
		}
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d", ws, st.Dev, st.Ino)))
	path := filepath.Join(dir, fmt.Sprintf("%x.lock", sum[:16]))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("workspace lock %q: %w", path, unwrapPath(err))
	}
	if err := linux.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("workspace lock %q: %w", path, err)
	}
	b, _ := json.Marshal(lockRecord{Session: id, Workspace: ws, Dev: st.Dev, Ino: st.Ino, PID: os.Getpid()})
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("workspace lock %q: %w", path, err)
	}
	return &workspaceLock{f: f, path: path}, nil
}

// readLock reads a lock file and reports whether its holder still holds
// it (a non-blocking flock of it fails).
func readLock(path string) (lockRecord, bool) {
	var r lockRecord
	f, err := os.Open(path)
	if err != nil {
		return r, false
	}
	defer f.Close()
	if err := linux.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		return r, false
	}
	b := make([]byte, 64<<10)
	n, _ := f.Read(b)
	if json.Unmarshal(b[:n], &r) != nil || !strings.HasPrefix(r.Workspace, "/") {
		// Held, but not yet written (its holder is between create and
		// write, under the guard we hold: cannot happen) or damaged:
		// treat it as covering everything rather than nothing.
		r.Workspace = "/"
	}
	return r, true
}

// release frees the lock; a nil lock is fine.
func (l *workspaceLock) release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	l.f = nil
}

// running reports whether a live workspace lock names session id: its
// supervisor (or an apply of it) is alive.
func (s *Store) running(id string) bool {
	names, _ := filepath.Glob(filepath.Join(s.dir, locksDir, "*.lock"))
	for _, p := range names {
		if r, live := readLock(p); live && r.Session == id {
			return true
		}
	}
	return false
}
