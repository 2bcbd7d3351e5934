package layerseal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// pruningDir holds, in the state dir, sessions Prune is removing: a
// session is moved there first (under the guard), so no one finds it
// half removed, and a prune that died part way is finished by the next.
const pruningDir = "pruning"

// PruneOptions tunes Prune.
type PruneOptions struct {
	// OlderThan keeps sessions that finished less than this long ago
	// (when their journal was last written: applied or discarded; or, for
	// one without a journal, when its run ended or, failing that, began).
	// Zero prunes them whatever their age.
	OlderThan time.Duration
	// Force removes staged and interrupted sessions too, with the change
	// sets they keep. A running session is never removed.
	Force bool
	// Now is when ages are measured from; time.Now() when zero.
	Now time.Time
}

// Pruned is what Prune did with one session.
type Pruned struct {
	SessionInfo
	// Removed says its record and state went; its output dir is never
	// touched.
	Removed bool `json:"removed"`
	// ChangeSet says a change set went with it: a staged or interrupted
	// session removed with Force, or what an apply left in its upper
	// layer (a partly applied session).
	ChangeSet bool `json:"change_set_removed"`
	// Why says why a session was kept.
	Why string `json:"kept_because,omitempty"`
	// Since is when it finished (see PruneOptions.OlderThan).
	Since time.Time `json:"finished"`
}

// Prune removes the records and state of the store's finished sessions
// (applied or discarded) and reports what it did with every session,
// oldest first. It never removes a running session (its supervisor or an
// apply of it holds its workspace lock, or answers on its control
// socket), nor a staged or interrupted one unless opt.Force. It decides
// and moves sessions out of the way under the state dir's guard, under
// which runs and applies take their workspace locks, and an apply checks
// after taking its lock that its session is still there.
func (s *Store) Prune(opt PruneOptions) ([]Pruned, error) {
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	if opt.OlderThan < 0 {
		return nil, fmt.Errorf("a negative age (%v) prunes nothing: give a duration of zero or more", opt.OlderThan)
	}
	if opt.Now.IsZero() {
		opt.Now = time.Now()
	}
	if _, err := os.Stat(s.dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // no session was ever run with it
		}
		return nil, fmt.Errorf("state dir %q: %w", s.dir, unwrapPath(err))
	}
	list, moved, err := s.pruneMove(opt)
	// Removing can take long (a large upper layer): out of the guard.
	for _, p := range moved {
		if rerr := os.RemoveAll(p); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove %q: %w", p, rerr))
		}
	}
	return list, err
}

// pruneMove decides, under the guard, which sessions go, and moves them
// to the pruning dir; it returns the paths to remove, leftovers of an
// earlier prune among them.
func (s *Store) pruneMove(opt PruneOptions) ([]Pruned, []string, error) {
	g, err := s.guard()
	if err != nil {
		return nil, nil, err
	}
	defer g.Close()
	pruning := filepath.Join(s.dir, pruningDir)
	moved, _ := filepath.Glob(filepath.Join(pruning, "*"))
	dirs, recs, _, err := s.records() // an unreadable session is never pruned
	if err != nil {
		return nil, moved, err
	}
	var list []Pruned
	for i, r := range recs {
		d := dirs[i]
		p := Pruned{SessionInfo: s.info(d, r)}
		p.Since = p.Started
		if !p.Ended.IsZero() {
			p.Since = p.Ended
		}
		if j, err := d.readJournal(); err == nil && j != nil {
			p.Since = j.Time
		}
		switch p.State {
		case StateRunning:
			p.Why = "it is running"
		case StateStaged, StateInterrupted, StateBranch:
			if !opt.Force {
				p.Why = "its change set is kept (" + p.State + "): apply or discard it first, or prune with --force to drop it"
			}
		}
		if age := opt.Now.Sub(p.Since); p.Why == "" && age < opt.OlderThan {
			p.Why = fmt.Sprintf("it finished %s ago, less than %s", age.Round(time.Second), opt.OlderThan)
		}
		if p.Why == "" {
			p.ChangeSet = p.State != StateDiscarded && holds(d.upper())
			if err := os.MkdirAll(pruning, 0o700); err != nil {
				return list, moved, fmt.Errorf("state dir %q: %w", s.dir, unwrapPath(err))
			}
			to := filepath.Join(pruning, r.ID)
			if err := os.Rename(string(d), to); err != nil {
				return list, moved, fmt.Errorf("prune session %s: %w", r.ID, unwrapPath(err))
			}
			p.Removed, p.Detail, moved = true, "", append(moved, to)
		}
		list = append(list, p)
	}
	sortSessions(list, func(p Pruned) SessionInfo { return p.SessionInfo })
	return list, moved, nil
}

// holds reports whether dir exists and is not empty.
func holds(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) > 0
}
