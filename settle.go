package layerseal

import (
	"errors"
	"fmt"
	"strings"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// settle decides, after the statement env of st is written, whether the
// session's change set goes to the workspace now: not when the policy
// stages it or when the sweep could not revert a violation (both leave it
// for `layerseal diff`, `apply` and `discard`). It reports whether it
// applied.
func (s *session) settle(env []byte, st *attest.Statement, excluded *subtrees) (bool, error) {
	if s.cfg.Policy.Apply == policy.ApplyStage {
		return false, nil // the caller says how to go on
	}
	if b := blocked(st); len(b) > 0 {
		s.log("the sweep could not revert %v: the change set is staged, not applied", b)
		return false, nil
	}
	if lowerMoved(st.Incomplete) {
		s.log("the workspace path %q no longer leads to the directory the session started on: nothing is applied; the change set is kept in %s (`layerseal diff %s` shows it, `layerseal discard %s` drops it)", s.ws, s.dir, s.out, s.out)
		return false, nil
	}
	if unexamined(st.Incomplete) {
		s.log("parts of the upper layer were not examined (see the incomplete reasons): nothing is applied automatically; `layerseal apply %s` applies what was examined and keeps the rest in %s", s.out, s.dir.upper())
		return false, nil
	}
	if st.Exit.Interrupt != "" {
		s.log("the run was interrupted (%s): the change set is staged, not applied", st.Exit.Interrupt)
		return false, nil
	}
	if why := holdBack(st); why != "" && s.cfg.Policy.Apply != policy.ApplyAlways {
		s.log("%s: the change set is staged, not applied (`apply: always` in layerseal.yaml applies it anyway)", why)
		return false, nil
	}
	sg := &staged{dir: s.dir, rec: s.rec, env: env, st: st, launch: s.launchRec, ws: s.wsDir, r: s.reader, excluded: excluded}
	var changed *WorkspaceChangedError
	if err := sg.apply(s.out, ApplyOptions{Stop: s.intr.stop, Progress: s.cfg.Progress}); errors.As(err, &changed) {
		s.log("%v", err)
		return false, nil
	} else if err != nil {
		return false, err
	}
	return true, nil
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
