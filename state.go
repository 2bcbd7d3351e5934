package layerseal

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
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

// sessionRecord is kept in the session's state directory so that a later
// command can find the session's upper layer and key from its output dir.
type sessionRecord struct {
	ID        string `json:"id"`
	Workspace string `json:"workspace"`
	Out       string `json:"out"`
	PublicKey []byte `json:"public_key"` // ed25519, raw
	// Launched is when the agent could first see the workspace, read on
	// the clock file times are stamped with (linux.CoarseNow), in
	// nanoseconds: a workspace entry with a later ctime was changed by
	// someone else during or after the run (a conflict).
	Launched int64 `json:"launched_ns"`
	// Started is when the session began (the supervisor's clock): an
	// output dir names its newest session.
	Started time.Time `json:"started"`
}

// sessionDir is where one session keeps its overlay layers.
type sessionDir string

func (d sessionDir) upper() string  { return filepath.Join(string(d), "upper") }
func (d sessionDir) work() string   { return filepath.Join(string(d), "work") }
func (d sessionDir) record() string { return filepath.Join(string(d), "session.json") }

func sessionPath(stateDir, id string) sessionDir {
	return sessionDir(filepath.Join(stateDir, "sessions", id))
}

// createSession makes the session's directories (0700, root) and checks
// that their filesystem can hold an upper layer: whiteouts (char 0:0) and
// trusted xattrs.
func createSession(stateDir, id string) (sessionDir, error) {
	if err := os.MkdirAll(filepath.Join(stateDir, "sessions"), 0o700); err != nil {
		return "", fmt.Errorf("state dir %q: %w", stateDir, err)
	}
	d := sessionPath(stateDir, id)
	for _, p := range []string{string(d), d.upper(), d.work()} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return "", fmt.Errorf("state dir %q: %w", stateDir, err)
		}
	}
	if err := checkUpperCapable(string(d)); err != nil {
		os.RemoveAll(string(d))
		return "", fmt.Errorf("state dir %q is on a filesystem that cannot hold an overlay upper layer: %w", stateDir, err)
	}
	return d, nil
}

func checkUpperCapable(dir string) error {
	p := filepath.Join(dir, "whiteout-check")
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, 0); err != nil {
		return fmt.Errorf("mknod whiteout: %w", err)
	}
	defer os.Remove(p)
	if err := unix.Lsetxattr(p, "trusted.overlay.check", []byte("y"), 0); err != nil {
		return fmt.Errorf("set trusted xattr: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	if fs.Type == unix.OVERLAYFS_SUPER_MAGIC {
		return errors.New("it is itself an overlay")
	}
	return nil
}

func (d sessionDir) writeRecord(r sessionRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(d.record(), b, 0o600)
}

// findSession finds a session in stateDir by ref: a session id (32 hex
// digits) with state there, or an output dir, which names the newest
// session written there (by start time), so reusing an output dir never
// reaches the older session.
func findSession(stateDir, ref string) (sessionDir, sessionRecord, error) {
	if isSessionID(ref) {
		d := sessionPath(stateDir, ref)
		if _, err := os.Lstat(d.record()); err == nil {
			r, err := d.readRecord()
			return d, r, err
		}
	}
	out := evalOrSelf(absOrSelf(ref))
	recs, _ := filepath.Glob(filepath.Join(stateDir, "sessions", "*", "session.json"))
	var best sessionDir
	var bestRec sessionRecord
	for _, p := range recs {
		d := sessionDir(filepath.Dir(p))
		r, err := d.readRecord()
		if err != nil {
			return "", sessionRecord{}, err
		}
		if r.Out != out {
			continue
		}
		if best == "" || r.Started.After(bestRec.Started) || r.Started.Equal(bestRec.Started) && r.ID > bestRec.ID {
			best, bestRec = d, r
		}
	}
	if best == "" {
		if _, err := os.Stat(stateDir); err != nil {
			return "", sessionRecord{}, fmt.Errorf("no session %q: the state dir %q: %w", ref, stateDir, unwrapPath(err))
		}
		return "", sessionRecord{}, fmt.Errorf("no session %q in the state dir %q: give an output dir or a session id (`layerseal sessions` lists them)", ref, stateDir)
	}
	return best, bestRec, nil
}

// readRecord reads and checks the session's record.
func (d sessionDir) readRecord() (sessionRecord, error) {
	var r sessionRecord
	b, err := os.ReadFile(d.record())
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("session record %q is damaged: %w", d.record(), err)
	}
	if filepath.Base(string(d)) != r.ID || len(r.PublicKey) != ed25519.PublicKeySize {
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

func absOrSelf(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// writeFileAtomic writes data to a temporary file beside path, syncs it and
// renames it into place, so path holds either nothing or all of data.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// within reports whether p is dir or beneath it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
