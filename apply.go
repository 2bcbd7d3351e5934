package layerseal

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/overlay"
)

// applySession applies a signed statement's entries from the session's
// upper layer to the workspace. The upper layer is only read, so a failed
// apply loses nothing and can be run again.
func applySession(dir sessionDir, ws, out string, st *attest.Statement) error {
	if err := overlay.Apply(dir.upper(), ws, st.Entries, overlay.ApplyOptions{}); err != nil {
		return fmt.Errorf("%w; the change set is kept in %s: run `layerseal apply %s` to finish", err, dir, out)
	}
	return nil
}

// Apply finishes applying the change set of the session whose output dir is
// out: it verifies the statement there against the key pinned in the
// session's state, applies it again (every step is idempotent) and then
// drops the session's upper layer unless parts of it were not examined.
func Apply(out, stateDir string) (*attest.Statement, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	env, err := os.ReadFile(filepath.Join(out, StatementFile))
	if err != nil {
		return nil, fmt.Errorf("output dir %q: %w", out, unwrapPath(err))
	}
	launch, err := os.ReadFile(filepath.Join(out, LaunchFile))
	if err != nil {
		return nil, fmt.Errorf("output dir %q: %w", out, unwrapPath(err))
	}
	dir, rec, err := findSession(stateDir, evalOrSelf(absOrSelf(out)))
	if err != nil {
		return nil, err
	}
	st, err := attest.VerifyStatement(env, ed25519.PublicKey(rec.PublicKey), launch)
	if err != nil {
		return nil, fmt.Errorf("statement in %q: %w", out, err)
	}
	if st.SessionID != rec.ID {
		return nil, fmt.Errorf("statement in %q is of session %s, but the session state for it is of %s", out, st.SessionID, rec.ID)
	}
	if err := applySession(dir, rec.Workspace, out, st); err != nil {
		return st, err
	}
	if unexamined(st.Incomplete) {
		return st, nil
	}
	return st, os.RemoveAll(string(dir))
}
