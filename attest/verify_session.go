package attest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrIncomplete is wrapped by Verify's error when the artifact verified
// but is incomplete: the Artifact returned with it is valid, and its
// Incomplete reasons say where the session did not look. A caller that
// only checks for a nil error thus never takes an incomplete statement
// for a complete one.
var ErrIncomplete = errors.New("verified but incomplete")

// ErrOtherSession is wrapped by Diff's error for two artifacts of
// different sessions.
var ErrOtherSession = errors.New("diff compares two points of one session")

// Artifact is a statement, a checkpoint or a launch record as Verify or
// Load found it: exactly one of Statement, Checkpoint and Launch is set.
type Artifact struct {
	Path       string
	Statement  *Statement
	Checkpoint *Checkpoint // the last of Chain
	Launch     *LaunchRecord

	// Entries are all the changes: a statement's, or a checkpoint's
	// resolved through the checkpoints before it.
	Entries []Entry

	// Verified says the signatures were checked (Verify, or Load with a
	// key).
	Verified bool
	// LaunchChecked says a statement or checkpoint was checked to be
	// bound to the launch record given in VerifyOptions.
	LaunchChecked bool

	// Chain is the checkpoint chain checked: for a checkpoint, the ones
	// up to it; for a statement, every one in ChainDir, the last bound
	// to the statement.
	Chain    []*Checkpoint
	ChainDir string
}

// SessionID is the session the artifact is of.
func (a *Artifact) SessionID() string {
	id, _, _, _ := a.summary()
	return id
}

// Complete reports whether the statement or checkpoint examined every
// entry in its scope; a launch record is complete.
func (a *Artifact) Complete() bool {
	_, _, complete, _ := a.summary()
	return complete
}

// Incomplete is the statement's or checkpoint's reasons for being
// incomplete.
func (a *Artifact) Incomplete() []Reason {
	_, _, _, reasons := a.summary()
	return reasons
}

// summary is what the artifact says of itself: its session, the SHA-256
// of the launch record it is bound to (none for a launch record), and its
// completeness.
func (a *Artifact) summary() (session string, launch []byte, complete bool, reasons []Reason) {
	switch {
	case a.Statement != nil:
		st := a.Statement
		return st.SessionID, st.Launch, st.Complete, st.Incomplete
	case a.Checkpoint != nil:
		cp := a.Checkpoint
		return cp.SessionID, cp.Launch, cp.Complete, cp.Incomplete
	case a.Launch != nil:
		return a.Launch.SessionID, nil, true, nil
	}
	return "", nil, true, nil
}

// result is a verified artifact with the error its completeness calls for.
func (a *Artifact) result() (*Artifact, error) {
	if !a.Complete() {
		return a, fmt.Errorf("%w: %d reason(s)", ErrIncomplete, len(a.Incomplete()))
	}
	return a, nil
}

// VerifyOptions are what Verify checks beside the artifact itself.
type VerifyOptions struct {
	// Launch is the session's launch record envelope: a statement or
	// checkpoint must be bound to it. Nil: the binding is not checked.
	Launch []byte
	// Checkpoints is the directory of a statement's checkpoint chain.
	// Empty: CheckpointDir beside the statement, when it exists.
	Checkpoints string
}

// VerifySession verifies the session in the output directory out: its
// statement bound to its launch record and to its checkpoint chain, as
// Verify does. Its errors name the file.
func VerifySession(out string, pub PublicKey) (*Artifact, error) {
	path := filepath.Join(out, StatementFile)
	env, err := ReadArtifact(path)
	if err != nil {
		return nil, err
	}
	launch, err := ReadArtifact(filepath.Join(out, LaunchFile))
	if err != nil {
		return nil, err
	}
	a, err := Verify(path, env, pub, VerifyOptions{Launch: launch})
	if err != nil && !errors.Is(err, ErrIncomplete) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, err
}

// Verify verifies env, the file at path, with pub, whatever it holds:
//
//   - a checkpoint: its signature and log head, and the chain of
//     checkpoints before it in path's directory (VerifyChain), bound to
//     opts.Launch when given;
//   - a launch record: its signature (opts is not used);
//   - a statement: its signature and Merkle root, its binding to
//     opts.Launch when given, and the checkpoint chain in
//     opts.Checkpoints (or beside path) with its binding to the statement
//     (CheckStatementHead).
//
// An artifact that does not verify is an error wrapping ErrNotVerified
// (its message says which check failed, found by trying them one at a
// time), ErrMalformed or ErrChain, not prefixed with path. One that
// verifies but is incomplete returns the Artifact and an error wrapping
// ErrIncomplete. Verify reads the chain's files; it costs what
// VerifyStatement and VerifyChain cost.
func Verify(path string, env []byte, pub PublicKey, opts VerifyOptions) (*Artifact, error) {
	a := &Artifact{Path: path, Verified: true}
	if cp, err := ReadCheckpoint(env); err == nil {
		cps, all, err := verifyChainTo(path, env, cp.Seq, pub, opts.Launch)
		if err != nil {
			return nil, err
		}
		a.Checkpoint, a.Chain, a.ChainDir, a.Entries = cps[len(cps)-1], cps, filepath.Dir(path), all
		a.LaunchChecked = opts.Launch != nil
		return a.result()
	}
	if _, err := ReadLaunch(env); err == nil {
		l, err := VerifyLaunch(env, pub)
		if err != nil {
			return nil, whyNotVerified(err, env, pub, nil)
		}
		a.Launch = l
		return a, nil
	}
	st, err := VerifyStatement(env, pub, opts.Launch)
	if err != nil && isSigstoreBundle(env) {
		return nil, errSigstoreBundle
	}
	if err != nil {
		return nil, whyNotVerified(err, env, pub, opts.Launch)
	}
	a.Statement, a.Entries, a.LaunchChecked = st, st.Entries, opts.Launch != nil
	a.ChainDir = opts.Checkpoints
	if beside := filepath.Join(filepath.Dir(path), CheckpointDir); a.ChainDir == "" && isDir(beside) {
		a.ChainDir = beside
	}
	if a.ChainDir == "" && st.CheckpointHead != nil {
		return nil, fmt.Errorf("%w: the statement commits to a checkpoint chain (its last checkpoint's SHA-256 is %x) and no %s dir lies beside it: give the chain's dir (verify --checkpoints DIR)",
			ErrChain, st.CheckpointHead, CheckpointDir)
	}
	if a.ChainDir == "" {
		return a.result()
	}
	envs, err := ReadChainDir(a.ChainDir)
	if err != nil {
		return nil, err
	}
	if a.Chain, _, err = VerifyChain(envs, pub, opts.Launch); err != nil {
		return nil, err
	}
	var last []byte
	var lastCP *Checkpoint
	if len(envs) > 0 {
		last, lastCP = envs[len(envs)-1], a.Chain[len(a.Chain)-1]
	}
	if err := CheckStatementHead(st, last, lastCP); err != nil {
		return nil, err
	}
	return a.result()
}

// Load reads env, the file at path, as a statement or a checkpoint for
// showing it and for Diff: a checkpoint with all its changes, resolved
// through the checkpoints before it in path's directory. With pub not the zero key
// it checks the signatures too (a checkpoint's with the whole chain
// before it), but not the binding to a launch record nor a statement's
// chain: Verify does. Its errors name path.
func Load(path string, env []byte, pub PublicKey) (*Artifact, error) {
	a := &Artifact{Path: path, Verified: !pub.IsZero()}
	if cp, err := ReadCheckpoint(env); err == nil {
		cps, all, err := verifyChainTo(path, env, cp.Seq, pub, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		a.Checkpoint, a.Chain, a.ChainDir, a.Entries = cps[len(cps)-1], cps, filepath.Dir(path), all
		return a, nil
	}
	var st *Statement
	var err error
	if !pub.IsZero() {
		st, err = VerifyStatement(env, pub, nil)
	} else {
		st, err = ReadStatement(env)
	}
	if err != nil && isSigstoreBundle(env) {
		return nil, fmt.Errorf("%s: %w", path, errSigstoreBundle)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is neither a checkpoint nor a statement: %w", path, err)
	}
	a.Statement, a.Entries = st, st.Entries
	return a, nil
}

// verifyChainTo reads checkpoints 1 to seq from the directory of path,
// whose envelope file env must be the last of them, verified with pub
// (when not nil) as a chain bound to launch (when not nil), and returns
// them and all the changes of the last.
func verifyChainTo(path string, env []byte, seq uint64, pub PublicKey, launch []byte) ([]*Checkpoint, []Entry, error) {
	envs, err := readChainUpTo(filepath.Dir(path), seq)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(envs[len(envs)-1], env) {
		return nil, nil, fmt.Errorf("%w: %s is not the checkpoint %d of its directory", ErrChain, path, seq)
	}
	if !pub.IsZero() {
		return VerifyChain(envs, pub, launch)
	}
	cps := make([]*Checkpoint, len(envs))
	for i, env := range envs {
		if cps[i], err = ReadCheckpoint(env); err != nil {
			return nil, nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
	}
	all, err := ChangesOf(cps)
	return cps, all, err
}

// whyNotVerified turns the one opaque ErrNotVerified of a statement or
// launch record into which check failed, found by trying them one at a
// time: the key the envelope names, then the signature and content
// without the launch record, then the binding to it.
func whyNotVerified(err error, env []byte, pub PublicKey, launch []byte) error {
	if !errors.Is(err, ErrNotVerified) {
		return err
	}
	if id, kerr := SignerKeyID(env); kerr == nil && id != KeyID(pub) {
		return fmt.Errorf("%w: signed with key %s, not with the given key %s (wrong --key?)", err, id, KeyID(pub))
	}
	if launch != nil {
		if _, serr := VerifyStatement(env, pub, nil); serr == nil {
			if _, lerr := VerifyLaunch(launch, pub); lerr != nil {
				return fmt.Errorf("%w: the launch record given with --launch does not verify with this key", err)
			}
			return fmt.Errorf("%w: the statement is not bound to the launch record given with --launch (another session's?)", err)
		}
	}
	return fmt.Errorf("%w: the signature does not match the content (the file was altered or corrupted)", err)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
