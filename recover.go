package layerseal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
)

// Recover attests a session whose supervisor died before it wrote a
// statement (killed, or the machine went down): the agent's namespace died
// with the supervisor, so the upper layer is quiescent and holds every
// change the agent made. Recover verifies the session's launch record with
// key (the supervisor's key is gone with it, so the caller loads it
// again: it must be the key pinned at launch), reads the upper layer under
// the launched policy, sweeps protected paths, and signs a statement that
// is incomplete with attest.UnobservedEnd, made as a run's is
// (finishStatement: the sandbox's reasons, mounts beneath the workspace,
// its identity and conflicts are checked the same way). It writes the statement to the
// output dir and leaves the change set staged for `diff`, `apply` and
// `discard`, and the statement's signed head beside the statement (when
// only that fails, it returns the statement with an error wrapping
// ErrHeadNotWritten), and its Sigstore bundle (ErrSigstoreNotWritten
// likewise). A session that already has a statement is refused.
func (s *Store) Recover(out string, key *attest.Signer) (*attest.Statement, error) {
	if key == nil {
		return nil, errors.New("no signing key")
	}
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	dir, rec, err := s.find(out)
	if err != nil {
		return nil, err
	}
	abs := rec.Out
	if s.running(rec.ID) {
		return nil, fmt.Errorf("session %s is still running: its supervisor signs its statement when it ends (`layerseal sessions` shows it)", rec.ID)
	}
	if !rec.PublicKey.Equal(key.Public()) {
		return nil, fmt.Errorf("key %s is not the key session %s was launched with", key.KeyID(), rec.ID)
	}
	for _, p := range []string{filepath.Join(string(dir), StatementFile), filepath.Join(abs, StatementFile)} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("session %s already has a statement (%s): nothing to recover", rec.ID, p)
		}
	}
	launchEnv, err := os.ReadFile(filepath.Join(string(dir), LaunchFile))
	if err != nil {
		return nil, fmt.Errorf("session %s has no launch record: %w (the agent never started, so nothing changed)", rec.ID, unwrapPath(err))
	}
	launch, err := attest.VerifyLaunch(launchEnv, key.Public())
	if err != nil {
		return nil, fmt.Errorf("launch record of session %s: %w", rec.ID, err)
	}
	if launch.SessionID != rec.ID || string(launch.Workspace) != rec.Workspace {
		return nil, fmt.Errorf("launch record of session %s does not match its state", rec.ID)
	}
	ws, err := openWorkspace(rec.Workspace, launch.Lower)
	if err != nil {
		return nil, fmt.Errorf("%w: its change set cannot be classified against it; it is kept in %s (`layerseal discard %s` drops it)", err, dir, out)
	}
	defer ws.Close()
	r, err := sessionReader(dir, rec.Workspace, ws, launch.Policy)
	if err != nil {
		return nil, err
	}
	detail := "the supervisor did not observe the end of the run: it was gone before the agent ended, whose exit status is unknown; this statement was made by `layerseal recover`"
	// Bind the session's checkpoint chain, as the supervisor would have:
	// the statement then verifies with it. A chain that does not verify
	// is not bound, and the reason says so.
	chain, err := attest.ReadChainDir(filepath.Join(rec.Out, CheckpointDir))
	var cps []*attest.Checkpoint
	if err == nil && len(chain) > 0 {
		cps, _, err = attest.VerifyChain(chain, key.Public(), launchEnv)
	}
	var head []byte
	var egress []attest.Egress
	switch {
	case err != nil:
		detail += fmt.Sprintf("; the checkpoints in %s are not bound: %v", filepath.Join(rec.Out, CheckpointDir), err)
	case len(chain) > 0:
		head = sha(chain[len(chain)-1])
		// The proxy's records died with the supervisor: the last
		// checkpoint's are what is known of them.
		egress = cps[len(cps)-1].Egress
	}
	if launch.Sandbox.Network == NetworkProxy {
		detail += "; the agent's connections after the last checkpoint are not recorded"
	}
	// The mounts beneath the workspace at launch were not kept: those
	// there now stand for them.
	reasons, err := submounts(rec.Workspace)
	if err != nil {
		return nil, err
	}
	// The supervisor's death killed the namespace's init, and with it
	// every process of the agent; how the agent itself ended, no one saw.
	reasons = append(reasons, attest.Reason{Code: attest.UnobservedEnd, Detail: detail})
	st, _, b, err := finishStatement(r, ending{rec: rec, launchEnv: launchEnv, launch: launch, ws: ws,
		exit: attest.Exit{Unknown: true}, reasons: reasons, egress: egress, head: head, key: key})
	if err != nil {
		return nil, fmt.Errorf("%w; the change set is kept in %s", err, dir)
	}
	if err := atomicfile.Write(filepath.Join(string(dir), StatementFile), b, 0o600); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(filepath.Join(abs, LaunchFile)); err != nil {
		if err := atomicfile.Write(filepath.Join(abs, LaunchFile), launchEnv, 0o644); err != nil {
			return nil, err
		}
	}
	if err := atomicfile.Write(filepath.Join(abs, StatementFile), b, 0o644); err != nil {
		return nil, err
	}
	var errs []error
	if err := writeHead(key, attest.HeadOf(st), filepath.Join(abs, attest.HeadFile(StatementFile)), atomicfile.Write); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrHeadNotWritten, err))
	}
	if err := writeSigstore(key, b, filepath.Join(abs, SigstoreFile), atomicfile.Write); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}
