package attest

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
)

// ExportFormat is the format tag of an evidence export.
const ExportFormat = "https://layerseal.dev/export/v1"

// MaxExportSize bounds an export file: what ReadArtifact reads.
const MaxExportSize = MaxArtifactSize

// An Export is the whole evidence of one session in one file, for someone
// who holds only the session's public key: its launch record, its
// statement and the statement's signed head, its checkpoint chain with
// each checkpoint's head, and any proof bundles made of the statement.
// VerifyExport checks all of it offline.
//
// An export file is canonical JSON followed by one newline, an object with
// exactly these members, in this order, every file in base64 (standard,
// padded), byte for byte as a run wrote it:
//
//	format       "https://layerseal.dev/export/v1"
//	launch       the launch record's envelope file (launch.json)
//	statement    the statement's envelope file (statement.json)
//	head         the statement's signed head (statement.head.json)
//	checkpoints  array, in seq order from 1, of {"checkpoint": a
//	             checkpoint's envelope file (checkpoints/NNNNNN.json),
//	             "head": its signed head (checkpoints/NNNNNN.head.json)};
//	             empty when the session took none
//	proofs       array of proof bundle files (see Bundle), each of the
//	             statement's head; empty when none was asked for
//
// An export discloses everything its statement does (every change, the
// workspace path, the policy, the agent's command line and environment in
// the launch record): it is for a verifier trusted with the whole session.
// A proof bundle alone discloses far less.
type Export struct {
	Launch      []byte
	Statement   []byte
	Head        []byte
	Checkpoints []ExportCheckpoint
	Proofs      [][]byte
}

// ExportCheckpoint is one checkpoint of an export with its signed head.
type ExportCheckpoint struct {
	Checkpoint []byte
	Head       []byte
}

type exportJSON struct {
	Format      string                 `json:"format"`
	Launch      []byte                 `json:"launch"`
	Statement   []byte                 `json:"statement"`
	Head        []byte                 `json:"head"`
	Checkpoints []exportCheckpointJSON `json:"checkpoints"`
	Proofs      [][]byte               `json:"proofs"`
}

type exportCheckpointJSON struct {
	Checkpoint []byte `json:"checkpoint"`
	Head       []byte `json:"head"`
}

// IsExport reports whether file begins as an export file does, for telling
// one from the other artifacts; ParseExport decides whether it is one.
func IsExport(file []byte) bool {
	return bytes.HasPrefix(file, []byte(`{"format":"`+ExportFormat+`"`))
}

// ReadExport reads the evidence of the session in the output directory
// out as a run leaves it: launch record, statement, its head, and every
// checkpoint in CheckpointDir with its head. It checks no signature
// (VerifyExport does) and adds no proof (set Proofs). A missing file is an
// error naming it.
func ReadExport(out string) (*Export, error) {
	x := &Export{}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{LaunchFile, &x.Launch}, {StatementFile, &x.Statement}, {HeadFile(StatementFile), &x.Head}} {
		b, err := ReadArtifact(filepath.Join(out, f.name))
		if err != nil {
			return nil, err
		}
		*f.dst = b
	}
	dir := filepath.Join(out, CheckpointDir)
	envs, err := ReadChainDir(dir)
	if err != nil {
		return nil, err
	}
	for i, env := range envs {
		head, err := ReadArtifact(filepath.Join(dir, HeadFile(CheckpointFile(uint64(i+1)))))
		if err != nil {
			return nil, fmt.Errorf("the head of checkpoint %d: %w", i+1, err)
		}
		x.Checkpoints = append(x.Checkpoints, ExportCheckpoint{Checkpoint: env, Head: head})
	}
	return x, nil
}

// Marshal returns the export file bytes of x.
func (x *Export) Marshal() ([]byte, error) {
	j := &exportJSON{Format: ExportFormat, Launch: x.Launch, Statement: x.Statement, Head: x.Head,
		Checkpoints: make([]exportCheckpointJSON, len(x.Checkpoints)), Proofs: x.Proofs}
	for i, c := range x.Checkpoints {
		j.Checkpoints[i] = exportCheckpointJSON(c)
	}
	if j.Proofs == nil {
		j.Proofs = [][]byte{}
	}
	out, err := canonicalJSON(j)
	if err != nil {
		return nil, fmt.Errorf("encode export: %w", err)
	}
	out = append(out, '\n')
	if len(out) > MaxExportSize {
		return nil, fmt.Errorf("an export of %d bytes is larger than the %d a verifier reads", len(out), MaxExportSize)
	}
	return out, nil
}

// ParseExport strictly parses an export file: its size, its one valid
// encoding (no unknown, duplicate or case-variant members, no trailing
// data), its format tag, and that no member is empty. It checks nothing
// inside the files it holds (VerifyExport does). Its errors wrap
// ErrMalformed.
func ParseExport(file []byte) (*Export, error) {
	if len(file) > MaxExportSize {
		return nil, malformed("export of %d bytes is over the limit of %d", len(file), MaxExportSize)
	}
	var j exportJSON
	if err := strictJSON(file, &j, "export"); err != nil {
		return nil, formatFirst(file, ExportFormat, err)
	}
	if j.Format != ExportFormat {
		return nil, malformed("unsupported format %q (this version reads %q)", j.Format, ExportFormat)
	}
	if err := canonicalCheck(file, &j, true, "export"); err != nil {
		return nil, err
	}
	x := &Export{Launch: j.Launch, Statement: j.Statement, Head: j.Head, Proofs: j.Proofs}
	if len(x.Launch) == 0 || len(x.Statement) == 0 || len(x.Head) == 0 {
		return nil, malformed("export without its launch record, statement or head")
	}
	for i, c := range j.Checkpoints {
		if len(c.Checkpoint) == 0 || len(c.Head) == 0 {
			return nil, malformed("export: checkpoint %d without its file or head", i+1)
		}
		x.Checkpoints = append(x.Checkpoints, ExportCheckpoint(c))
	}
	return x, nil
}

// Evidence is what an export that verified holds.
type Evidence struct {
	Launch    *LaunchRecord
	Statement *Statement
	Head      *Head
	// Chain is the checkpoint chain, in seq order, and Heads their heads.
	Chain []*Checkpoint
	Heads []*Head
	// Proofs are what each proof bundle shows, in the export's order.
	Proofs []*Proven
}

// Complete reports whether the export holds without qualification over
// what it was made for: each proof holds (Proven.Holds) when it carries
// proofs, or else the statement is complete.
func (ev *Evidence) Complete() bool {
	if len(ev.Proofs) == 0 {
		return ev.Statement.Complete
	}
	for _, p := range ev.Proofs {
		if !p.Holds() {
			return false
		}
	}
	return true
}

// VerifyExport verifies an export file with pub, all of it, offline: the
// launch record; every checkpoint and the chain they make, bound to the
// launch record (VerifyChain); each checkpoint's head, which must be the
// head of that checkpoint (HeadOfCheckpoint); the statement, bound to the
// launch record and to the chain's last checkpoint (VerifyStatement,
// CheckStatementHead); its head, which must be the statement's (HeadOf);
// and every proof bundle, whose head must be that head, byte for byte
// (VerifyBundle's checks). With opts.SessionID set, the session must be
// that one (opts.Launch is not used: the export carries its own).
//
// It returns ErrNotVerified, possibly wrapped with which part failed,
// when a signature, a binding, the chain or a proof fails; an error
// wrapping ErrMalformed for input it refuses; an error wrapping ErrChain
// for a chain that does not hold together. An export that verifies but
// does not hold without qualification (Evidence.Complete) returns the
// Evidence and an error wrapping ErrIncomplete. It costs what verifying
// each of its files costs.
func VerifyExport(file []byte, pub PublicKey, opts ProofOptions) (*Evidence, error) {
	x, err := ParseExport(file)
	if err != nil {
		return nil, err
	}
	ev := &Evidence{}
	part := func(what string, err error) error {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrChain) || errors.Is(err, ErrNotVerified) {
			return fmt.Errorf("%s: %w", what, err)
		}
		return fmt.Errorf("%s: %w: %v", what, ErrNotVerified, err)
	}
	if ev.Launch, err = VerifyLaunch(x.Launch, pub); err != nil {
		return nil, part("the launch record", whyNotVerified(err, x.Launch, pub, nil))
	}
	if opts.SessionID != "" && ev.Launch.SessionID != opts.SessionID {
		return nil, fmt.Errorf("%w: the export is of session %s, not of session %q", ErrNotVerified, ev.Launch.SessionID, opts.SessionID)
	}
	envs := make([][]byte, len(x.Checkpoints))
	for i, c := range x.Checkpoints {
		envs[i] = c.Checkpoint
	}
	if ev.Chain, _, err = VerifyChain(envs, pub, x.Launch); err != nil {
		return nil, part("the checkpoint chain", err)
	}
	for i, c := range x.Checkpoints {
		h, err := VerifyHead(c.Head, pub)
		if err != nil {
			return nil, part(fmt.Sprintf("the head of checkpoint %d", i+1), err)
		}
		if h.Kind != HeadKindCheckpoint || !h.Equal(HeadOfCheckpoint(ev.Chain[i])) {
			return nil, fmt.Errorf("the head of checkpoint %d: %w: it is not that checkpoint's head", i+1, ErrNotVerified)
		}
		ev.Heads = append(ev.Heads, h)
	}
	if ev.Statement, err = VerifyStatement(x.Statement, pub, x.Launch); err != nil {
		return nil, part("the statement", err)
	}
	var last []byte
	var lastCP *Checkpoint
	if n := len(envs); n > 0 {
		last, lastCP = envs[n-1], ev.Chain[n-1]
	}
	if err := CheckStatementHead(ev.Statement, last, lastCP); err != nil {
		return nil, fmt.Errorf("the statement: %w: it is not bound to the last checkpoint of the chain", err)
	}
	if ev.Head, err = VerifyHead(x.Head, pub); err != nil {
		return nil, part("the statement's head", err)
	}
	if ev.Head.Kind != HeadKindStatement || !ev.Head.Equal(HeadOf(ev.Statement)) {
		return nil, fmt.Errorf("the statement's head: %w: it is not the statement's head", ErrNotVerified)
	}
	for i, file := range x.Proofs {
		b, err := ParseBundle(file)
		if err != nil {
			return nil, part(fmt.Sprintf("proof %d", i+1), err)
		}
		if !bytes.Equal(b.Head, x.Head) {
			return nil, fmt.Errorf("proof %d: %w: it is not a proof of this statement's head", i+1, ErrNotVerified)
		}
		p, err := b.verifyAgainst(ev.Head)
		if err != nil && !errors.Is(err, ErrIncomplete) {
			return nil, part(fmt.Sprintf("proof %d", i+1), err)
		}
		ev.Proofs = append(ev.Proofs, p)
	}
	if !ev.Complete() {
		return ev, fmt.Errorf("%w: over what the export was made for", ErrIncomplete)
	}
	return ev, nil
}
