package layerseal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// Session states, as Sessions reports them.
const (
	StateRunning     = "running"     // its supervisor (or an apply of it) is alive
	StateStaged      = "staged"      // signed; the change set waits for apply or discard
	StateApplied     = "applied"     // applied (Skipped says when only partly)
	StateBranch      = "branch"      // written to a git branch (GitBranch); the workspace is as it was, the change set still staged
	StateDiscarded   = "discarded"   // dropped; the workspace was left as it was
	StateInterrupted = "interrupted" // its supervisor or an apply of it died part way (Detail says how to go on)
	StateUnreadable  = "unreadable"  // its record could not be read (Detail says why); it is left as it is
)

// SessionInfo is one session found in a state dir.
type SessionInfo struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	Workspace string `json:"workspace"`
	Out       string `json:"out"`
	// Started is when the session began; Ended when its run ended (the
	// statement's time), zero while there is no statement.
	Started     time.Time `json:"started"`
	Ended       time.Time `json:"ended,omitzero"`
	Checkpoints int       `json:"checkpoints"`
	// Changes is the statement's change count (while the session runs,
	// its last checkpoint's) and ToApply the size of the change set after
	// the sweep (both 0 without either).
	Changes int `json:"changes"`
	ToApply int `json:"to_apply"`
	// Skipped are the paths an apply left out (a partly applied session).
	Skipped []attest.Path `json:"skipped,omitempty"`
	// Applied and Discarded count the changes applies and discards of
	// parts (ApplyOptions.Only, Except; DiscardPart) settled; Staged
	// counts those still staged while the session is.
	Applied   int `json:"applied,omitempty"`
	Discarded int `json:"discarded,omitempty"`
	Staged    int `json:"staged,omitempty"`
	// GitBranch and GitCommit name the branch and commit the change set
	// was written to (Store.ApplyToGitBranch).
	GitBranch string `json:"git_branch,omitempty"`
	GitCommit string `json:"git_commit,omitempty"`
	// LaunchCommit is the commit the workspace's git HEAD was at when the
	// session launched, when the workspace is a repository whose HEAD
	// could be read then.
	LaunchCommit string `json:"launch_commit,omitempty"`
	// Detail says what to do next, when there is something to do.
	Detail string `json:"detail,omitempty"`
}

// Sessions lists the sessions of the store, oldest first.
func (s *Store) Sessions() ([]SessionInfo, error) {
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(s.dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // no session was ever run with it
		}
		return nil, fmt.Errorf("state dir %q: %w", s.dir, unwrapPath(err))
	}
	dirs, recs, bad, err := s.records()
	if err != nil {
		return nil, err
	}
	var out []SessionInfo
	for i, r := range recs {
		out = append(out, s.info(dirs[i], r))
	}
	for _, u := range bad {
		out = append(out, u.info())
	}
	sortSessions(out, func(i SessionInfo) SessionInfo { return i })
	return out, nil
}

// sortSessions sorts list oldest first (by start, then id).
func sortSessions[T any](list []T, info func(T) SessionInfo) {
	slices.SortFunc(list, func(a, b T) int {
		x, y := info(a), info(b)
		if c := x.Started.Compare(y.Started); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
}

// Session describes one session, named by its id or its output dir (the
// newest session written there).
func (s *Store) Session(ref string) (*SessionInfo, error) {
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	d, r, err := s.find(ref)
	if err != nil {
		return nil, err
	}
	info := s.info(d, r)
	return &info, nil
}

// info reads what a session's state dir says of it.
func (s *Store) info(d sessionDir, r sessionRecord) SessionInfo {
	info := SessionInfo{ID: r.ID, Workspace: r.Workspace, Out: r.Out, Started: r.Started}
	if r.GitHead != nil {
		info.LaunchCommit = r.GitHead.Commit
	}
	cps, _ := os.ReadDir(filepath.Join(r.Out, CheckpointDir))
	last := ""
	for _, e := range cps {
		if attest.LooksLikeCheckpoint(e.Name()) {
			info.Checkpoints++
			last = max(last, e.Name())
		}
	}
	live := s.running(r.ID)
	if !live {
		if conn, err := dialControl(d); err == nil {
			conn.Close()
			live = true
		}
	}
	var st *attest.Statement
	if env, err := os.ReadFile(filepath.Join(string(d), StatementFile)); err == nil {
		if s, err := attest.VerifyStatement(env, r.PublicKey, nil); err == nil {
			st = s
			info.Ended, info.Changes, info.ToApply = s.Ended, int(s.Count), int(s.AppliedCount)
		}
	}
	j, _ := d.readJournal()
	if j != nil {
		info.Applied, info.Discarded = len(j.Applied), len(j.Discarded)
		info.GitBranch, info.GitCommit = j.GitBranch, j.GitCommit
	}
	switch {
	case live:
		info.State = StateRunning
		// The changes so far are the last checkpoint's, when it verifies.
		if env, err := os.ReadFile(filepath.Join(r.Out, CheckpointDir, last)); last != "" && err == nil {
			if cp, err := attest.VerifyCheckpoint(env, r.PublicKey); err == nil && cp.SessionID == r.ID {
				info.Changes = int(cp.Count)
			}
		}
	case j != nil && j.State == journalApplied:
		info.State, info.Skipped = StateApplied, j.Skipped
		if len(j.Skipped) > 0 {
			info.Detail = fmt.Sprintf("partly applied: %d path(s) skipped, kept in %s", len(j.Skipped), d.upper())
		}
	case j != nil && j.State == journalDiscarded:
		info.State = StateDiscarded
	case j != nil && j.State == journalApplying:
		info.State, info.Detail = StateInterrupted, fmt.Sprintf("an apply stopped part way: `layerseal apply %s` finishes it", s.CommandRef(r.ID))
	case st != nil && j != nil && j.State == journalBranch:
		info.Staged = info.ToApply
		info.State, info.Detail = StateBranch, fmt.Sprintf("written to git branch %[1]s (commit %[2]s); the workspace is as it was: `git switch %[1]s` or `git merge %[1]s` takes it, `layerseal discard %[3]s` drops the staged copy (`layerseal apply %[3]s` applies it to the working tree instead)", strings.TrimPrefix(j.GitBranch, "refs/heads/"), j.GitCommit, s.CommandRef(r.ID))
	case st != nil && j != nil && j.State == journalPartial:
		info.Staged = max(info.ToApply-info.Applied-info.Discarded, 0)
		info.State, info.Detail = StateStaged, fmt.Sprintf("partly settled: %d change(s) applied, %d discarded, %d still staged: `layerseal diff %s` shows them", info.Applied, info.Discarded, info.Staged, s.CommandRef(r.ID))
	case st != nil:
		info.Staged = info.ToApply
		info.State, info.Detail = StateStaged, fmt.Sprintf("`layerseal diff %[1]s`, then `layerseal apply %[1]s` or `layerseal discard %[1]s`", s.CommandRef(r.ID))
	default:
		info.State, info.Detail = StateInterrupted, fmt.Sprintf("its supervisor ended before signing a statement: `layerseal recover --key KEY %s`", s.CommandRef(r.ID))
	}
	return info
}
