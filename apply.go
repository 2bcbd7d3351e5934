package layerseal

import (
	"fmt"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// settle decides, after the statement env of st is written, whether the
// session's change set goes to the workspace now: not when the policy
// stages it or when the sweep could not revert a violation (both leave it
// for `layerseal diff`, `apply` and `discard`). It reports whether it
// applied.
func (s *session) settle(env []byte, st *attest.Statement) (bool, error) {
	if s.cfg.Policy.Apply == policy.ApplyStage {
		s.log("the change set is staged: review it with `layerseal diff %s`, then `layerseal apply %s` or `layerseal discard %s`", s.out, s.out, s.out)
		return false, nil
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
	launch, err := attest.VerifyLaunch(s.launch, s.cfg.Key.Public())
	if err != nil {
		return false, fmt.Errorf("launch record: %w", err)
	}
	rec := sessionRecord{ID: st.SessionID, Workspace: s.ws, Out: s.out, PublicKey: s.cfg.Key.Public()}
	sg := &staged{dir: s.dir, rec: rec, env: env, st: st, launch: launch, ws: s.wsDir}
	if err := sg.apply(s.out, ApplyOptions{}); err != nil {
		return false, err
	}
	return true, nil
}
