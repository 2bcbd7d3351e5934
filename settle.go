package layerseal

import (
	"errors"
	"fmt"
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
	"github.com/layerseal/layerseal/policy"
)

// settle decides, after the statement env of st is written, whether the
// session's change set goes to the workspace now: not when the policy
// stages it or when the sweep could not revert a violation (both leave it
// for `layerseal diff`, `apply` and `discard`). It reports whether it
// applied. journaled says writeStatement already wrote the journal of an
// applied empty change set (see emptyApplied): nothing is left to do but
// drop the upper layer.
func (s *session) settle(env []byte, st *attest.Statement, excluded *subtrees, journaled bool) (bool, error) {
	if why, staged := s.staging(st); staged {
		if why != "" {
			s.log("%s", why)
		}
		return false, nil
	}
	if journaled {
		return true, s.dir.dropLayers()
	}
	sg := &staged{dir: s.dir, rec: s.rec, env: env, st: st, launch: s.launchRec, ws: s.wsDir, r: s.reader, excluded: excluded}
	var changed *WorkspaceChangedError
	if err := sg.apply(s.out, ApplyOptions{Stop: s.intr.stop, Progress: s.cfg.Progress, LeaveRemoval: s.cfg.LeaveRemoval}); errors.As(err, &changed) {
		s.log("%v", err)
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
}

// staging reports whether the change set of the session's statement st
// stays staged rather than applied at the end of the run, and why, in a
// line for the log ("" when the policy stages it: the caller says how to
// go on).
func (s *session) staging(st *attest.Statement) (why string, staged bool) {
	switch {
	case s.cfg.Policy.Apply == policy.ApplyStage:
		return "", true
	case len(blocked(st)) > 0:
		return fmt.Sprintf("the sweep could not revert %v: the change set is staged, not applied", blocked(st)), true
	case lowerMoved(st.Incomplete):
		return fmt.Sprintf("the workspace path %q no longer leads to the directory the session started on: nothing is applied; the change set is kept in %s (`layerseal diff %s` shows it, `layerseal discard %s` drops it)", s.ws, s.dir, s.out, s.out), true
	case unexamined(st.Incomplete):
		return fmt.Sprintf("parts of the upper layer were not examined (see the incomplete reasons): nothing is applied automatically; `layerseal apply %s` applies what was examined and keeps the rest in %s", s.out, s.dir.upper()), true
	case stoppedAtLimit(st.Incomplete):
		return fmt.Sprintf("the agent was stopped at a limit of its upper layer (see the incomplete reasons): what it wrote is kept in %s, staged, not applied", s.dir), true
	case interruptEnded(st.Exit):
		return fmt.Sprintf("the run was interrupted (%s) and the agent ended by it: the change set is staged, not applied", st.Exit.Interrupt), true
	}
	if why := holdBack(st); why != "" && s.cfg.Policy.Apply != policy.ApplyAlways {
		return why + ": the change set is staged, not applied (`apply: always` in layerseal.yaml applies it anyway)", true
	}
	return "", false
}

// interruptEnded reports whether an interrupt came and the agent ended
// with a signal or a non-zero status after it: the interrupt ended the run.
// An agent that took the interrupt and went on to exit 0 (Ctrl-C to stop a
// command in an interactive shell, then `exit`) ended as it chose to.
func interruptEnded(e attest.Exit) bool {
	return e.Interrupt != "" && (e.Signal != "" || e.Code != 0)
}

// emptyApplied is the journal file of st's session once its change set is
// applied, when that change set is empty and settle will apply it, or nil:
// an empty change set changes nothing in the workspace, so writeStatement
// writes this journal together with the statement env rather than after
// it, and settle has nothing left to write.
func (s *session) emptyApplied(st *attest.Statement, env []byte) *atomicfile.File {
	if _, staged := s.staging(st); staged || len(st.AppliedEntries()) > 0 || len(st.Excluded) > 0 {
		return nil
	}
	b, err := journal{State: journalApplied}.stamped(env)
	if err != nil {
		return nil
	}
	return &atomicfile.File{Path: s.dir.journal(), Data: b, Perm: 0o600}
}

// holdBack says why the automatic apply (policy.ApplyAuto) keeps st's
// change set staged, or "" when nothing does: violations, a non-zero exit,
// a signal, or an exit no one saw.
func holdBack(st *attest.Statement) string {
	var why []string
	if n := len(st.Violations); n > 0 {
		why = append(why, fmt.Sprintf("the agent changed %d protected path(s)", n))
	}
	switch {
	case st.Exit.Unknown:
		why = append(why, "no one saw how the agent ended")
	case st.Exit.Signal != "":
		why = append(why, "the agent was ended by "+st.Exit.Signal)
	case st.Exit.Code != 0:
		why = append(why, fmt.Sprintf("the agent exited with status %d", st.Exit.Code))
	}
	return strings.Join(why, " and ")
}
