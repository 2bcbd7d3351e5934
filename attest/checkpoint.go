package attest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// CheckpointPredicateType is the format tag of a checkpoint.
const CheckpointPredicateType = "https://layerseal.dev/checkpoint/v1"

// MaxCheckpointSize bounds a checkpoint's envelope file.
const MaxCheckpointSize = MaxStatementSize

// Checkpoint is a signed picture, taken while the agent runs, of what the
// agent has changed so far. The checkpoints of a session form an
// append-only RFC 6962 log (see CheckpointLog): checkpoint Seq is its leaf
// Seq−1, and carries the head of the log that ends with it, an inclusion
// proof of itself in that head, and a consistency proof from the previous
// checkpoint's head. The final statement binds the last checkpoint's
// envelope file (Statement.CheckpointHead), so no checkpoint can be
// dropped, reordered or rewritten without VerifyChain failing.
//
// The predicate's JSON members, in this order:
//
//	session_id, launch_sha256, key_id, workspace    as in a statement
//	seq              decimal string, 1 for the first checkpoint
//	taken            RFC 3339 UTC time with nanoseconds
//	probe_sha256     the probe digest of the upper layer, lowercase hex:
//	                 SHA-256 over the root's stat tuple and, for each
//	                 directory in path order, its path and the SHA-256 of
//	                 its entries' names and stat tuples (probe.Index)
//	probe_entries    entries the probe saw, decimal string
//	unchanged        true when the probe found nothing changed since
//	                 checkpoint same_as, whose changes this one repeats
//	                 without listing them
//	same_as          decimal string; omitted unless unchanged
//	base             decimal string; omitted when the checkpoint lists all
//	                 its changes. Otherwise the checkpoint lists only what
//	                 differs from the changes of checkpoint base, the last
//	                 one before it that walked: in changes, every entry
//	                 that is new or not the same (by leaf encoding), and in
//	                 removed, every path base listed that this one does not.
//	root, count, complete, incomplete, stats   as in a statement, of all
//	                 the changes so far (listed or not)
//	changes          the entries listed, sorted by path bytes; empty when
//	                 unchanged
//	removed          paths, sorted by bytes; empty unless base is set
//	log              {"size": decimal string (= seq), "root": hex,
//	                  "inclusion": [hex], "consistency": [hex]}
//	egress           the egress records so far, as in a statement (see
//	                 Egress); omitted when there are none
//
// A checkpoint that walks after another lists only the difference, so a
// checkpoint costs, in bytes, what changed since the last one, not what
// changed since the session began; ChangesOf (or VerifyChain) gives back
// its whole change list and checks it against root.
//
// The leaf hash (CheckpointLeaf) covers every member but changes and
// removed (bound through root) and log; egress included.
type Checkpoint struct {
	SessionID    string
	Launch       []byte // SHA-256 of the launch record's envelope file
	KeyID        string // set when signed
	Workspace    Bytes
	Seq          uint64 // set by CheckpointLog.Append
	Taken        time.Time
	Probe        []byte // 32 bytes
	ProbeEntries uint64
	Unchanged    bool
	SameAs       uint64 // with Unchanged: the checkpoint whose changes are repeated
	Base         uint64 // not 0: Entries and Removed are the difference from checkpoint Base
	Root         []byte // of all the changes; set when signed (copied from SameAs when Unchanged)
	Count        uint64 // of all the changes
	Complete     bool
	Incomplete   []Reason
	Entries      []Entry // the changes listed: all of them, or those new or different since Base; nil when Unchanged
	Removed      []Path  // with Base: the paths Base listed and this one does not
	Stats        Stats
	Log          TreeHead // set by CheckpointLog.Append
	Inclusion    [][]byte // of leaf Seq−1 in Log
	Consistency  [][]byte // from the head of size Seq−1 to Log
	Egress       []Egress // the proxy's records so far, sorted by CompareEgress
}

// TreeHead is the size and root of a checkpoint log.
type TreeHead struct {
	Size uint64
	Root []byte
}

type checkpointBodyJSON struct {
	SessionID    string       `json:"session_id"`
	Launch       string       `json:"launch_sha256"`
	KeyID        string       `json:"key_id"`
	Workspace    Bytes        `json:"workspace"`
	Seq          uint64       `json:"seq,string"`
	Taken        string       `json:"taken"`
	Probe        string       `json:"probe_sha256"`
	ProbeEntries uint64       `json:"probe_entries,string"`
	Unchanged    bool         `json:"unchanged"`
	SameAs       uint64       `json:"same_as,omitzero,string"`
	Base         uint64       `json:"base,omitzero,string"`
	Root         string       `json:"root"`
	Count        uint64       `json:"count,string"`
	Complete     bool         `json:"complete"`
	Incomplete   []reasonJSON `json:"incomplete"`
	Stats        statsJSON    `json:"stats"`
	Egress       []egressJSON `json:"egress,omitempty"`
}

type checkpointJSON struct {
	SessionID    string       `json:"session_id"`
	Launch       string       `json:"launch_sha256"`
	KeyID        string       `json:"key_id"`
	Workspace    Bytes        `json:"workspace"`
	Seq          uint64       `json:"seq,string"`
	Taken        string       `json:"taken"`
	Probe        string       `json:"probe_sha256"`
	ProbeEntries uint64       `json:"probe_entries,string"`
	Unchanged    bool         `json:"unchanged"`
	SameAs       uint64       `json:"same_as,omitzero,string"`
	Base         uint64       `json:"base,omitzero,string"`
	Root         string       `json:"root"`
	Count        uint64       `json:"count,string"`
	Complete     bool         `json:"complete"`
	Incomplete   []reasonJSON `json:"incomplete"`
	Changes      []entryJSON  `json:"changes"`
	Removed      []Path       `json:"removed"`
	Stats        statsJSON    `json:"stats"`
	Log          logJSON      `json:"log"`
	Egress       []egressJSON `json:"egress,omitempty"`
}

type logJSON struct {
	Size        uint64   `json:"size,string"`
	Root        string   `json:"root"`
	Inclusion   []string `json:"inclusion"`
	Consistency []string `json:"consistency"`
}

func (c *Checkpoint) body() *checkpointBodyJSON {
	b := &checkpointBodyJSON{
		SessionID: c.SessionID, Launch: hexOrEmpty(c.Launch), KeyID: c.KeyID, Workspace: c.Workspace,
		Seq: c.Seq, Taken: formatTime(c.Taken), Probe: hexOrEmpty(c.Probe), ProbeEntries: c.ProbeEntries,
		Unchanged: c.Unchanged, SameAs: c.SameAs, Base: c.Base, Root: hexOrEmpty(c.Root), Count: c.Count,
		Complete: c.Complete, Incomplete: make([]reasonJSON, len(c.Incomplete)), Stats: statsJSON(c.Stats),
		Egress: egressToJSON(c.Egress),
	}
	for i, r := range c.Incomplete {
		b.Incomplete[i] = reasonJSON{Code: r.Code, Path: r.Path, Detail: Bytes(r.Detail)}
	}
	return b
}

func (c *Checkpoint) toJSON() *checkpointJSON {
	b := c.body()
	j := &checkpointJSON{
		SessionID: b.SessionID, Launch: b.Launch, KeyID: b.KeyID, Workspace: b.Workspace, Seq: b.Seq,
		Taken: b.Taken, Probe: b.Probe, ProbeEntries: b.ProbeEntries, Unchanged: b.Unchanged,
		SameAs: b.SameAs, Base: b.Base, Root: b.Root, Count: b.Count, Complete: b.Complete, Incomplete: b.Incomplete,
		Changes: make([]entryJSON, len(c.Entries)), Removed: append([]Path{}, c.Removed...), Stats: b.Stats,
		Log:    logJSON{Size: c.Log.Size, Root: hexOrEmpty(c.Log.Root), Inclusion: hexList(c.Inclusion), Consistency: hexList(c.Consistency)},
		Egress: b.Egress,
	}
	for i := range c.Entries {
		e := &c.Entries[i]
		j.Changes[i] = entryJSON{Path: e.Path, Change: e.Change, Old: stateToJSON(e.Old), New: stateToJSON(e.New)}
	}
	return j
}

func hexList(hs [][]byte) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = hex.EncodeToString(h)
	}
	return out
}

func (j *checkpointJSON) fromJSON() (*Checkpoint, error) {
	c := &Checkpoint{
		SessionID: j.SessionID, KeyID: j.KeyID, Workspace: j.Workspace, Seq: j.Seq,
		ProbeEntries: j.ProbeEntries, Unchanged: j.Unchanged, SameAs: j.SameAs, Base: j.Base, Count: j.Count,
		Complete: j.Complete, Stats: Stats(j.Stats), Log: TreeHead{Size: j.Log.Size},
	}
	var err error
	for _, h := range []struct {
		what string
		s    string
		dst  *[]byte
	}{{"launch digest", j.Launch, &c.Launch}, {"probe digest", j.Probe, &c.Probe}, {"root", j.Root, &c.Root}, {"log root", j.Log.Root, &c.Log.Root}} {
		if *h.dst, err = parseHex(h.what, h.s); err != nil {
			return nil, err
		}
	}
	if c.Taken, err = parseTime("taken", j.Taken); err != nil {
		return nil, err
	}
	for _, l := range []struct {
		src []string
		dst *[][]byte
	}{{j.Log.Inclusion, &c.Inclusion}, {j.Log.Consistency, &c.Consistency}} {
		for _, s := range l.src {
			h, err := parseHex("proof hash", s)
			if err != nil {
				return nil, err
			}
			*l.dst = append(*l.dst, h)
		}
	}
	for _, r := range j.Incomplete {
		c.Incomplete = append(c.Incomplete, Reason{Code: r.Code, Path: r.Path, Detail: string(r.Detail)})
	}
	for _, ch := range j.Changes {
		e := Entry{Path: ch.Path, Change: ch.Change}
		if e.Old, err = stateFromJSON(ch.Old); err != nil {
			return nil, fmt.Errorf("entry %q: %w", string(ch.Path), err)
		}
		if e.New, err = stateFromJSON(ch.New); err != nil {
			return nil, fmt.Errorf("entry %q: %w", string(ch.Path), err)
		}
		c.Entries = append(c.Entries, e)
	}
	c.Removed = j.Removed
	if c.Egress, err = egressFromJSON(j.Egress); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks c's values, including that Count and Complete agree
// with Entries and Incomplete (for a checkpoint that lists its changes).
func (c *Checkpoint) validate() error {
	if err := checkSessionID(c.SessionID); err != nil {
		return err
	}
	if len(c.Launch) != 32 || len(c.Probe) != 32 || len(c.Root) != 32 {
		return errors.New("launch digest, probe digest and root must be 32 bytes")
	}
	if err := checkKeyID(c.KeyID); err != nil {
		return err
	}
	if c.Workspace == "" || strings.IndexByte(string(c.Workspace), 0) >= 0 {
		return fmt.Errorf("workspace %q is empty or holds NUL", string(c.Workspace))
	}
	if c.Seq == 0 {
		return errors.New("checkpoint seq 0")
	}
	if c.Unchanged != (c.SameAs != 0) || c.SameAs >= c.Seq {
		return fmt.Errorf("unchanged %t with same_as %d at seq %d", c.Unchanged, c.SameAs, c.Seq)
	}
	if c.Base >= c.Seq || c.Unchanged && c.Base != 0 {
		return fmt.Errorf("base %d at seq %d (unchanged %t)", c.Base, c.Seq, c.Unchanged)
	}
	if c.Unchanged && len(c.Entries) != 0 {
		return errors.New("unchanged checkpoint lists changes")
	}
	if c.Base == 0 && len(c.Removed) != 0 {
		return errors.New("checkpoint without base lists removed paths")
	}
	if !c.Unchanged && c.Base == 0 && c.Count != uint64(len(c.Entries)) {
		return fmt.Errorf("count %d but %d entries", c.Count, len(c.Entries))
	}
	if err := checkRemoved(c.Removed, c.Entries); err != nil {
		return err
	}
	if c.Complete != (len(c.Incomplete) == 0) {
		return fmt.Errorf("complete is %t with %d reasons", c.Complete, len(c.Incomplete))
	}
	for i := range c.Incomplete {
		if err := c.Incomplete[i].Valid(); err != nil {
			return err
		}
	}
	if err := checkEntries(c.Entries); err != nil {
		return err
	}
	if c.Log.Size != c.Seq || len(c.Log.Root) != 32 {
		return fmt.Errorf("log of size %d at seq %d", c.Log.Size, c.Seq)
	}
	if err := validateEgress(c.Egress); err != nil {
		return err
	}
	return checkTime("taken", c.Taken)
}

// checkRemoved refuses removed paths that are invalid, out of order or
// repeated, or also listed in entries (both sorted by bytes).
func checkRemoved(removed []Path, entries []Entry) error {
	for i, p := range removed {
		if err := p.Valid(); err != nil {
			return fmt.Errorf("removed path %d: %w", i, err)
		}
		if i > 0 && removed[i-1] >= p {
			return fmt.Errorf("removed paths %q and %q out of order or repeated", string(removed[i-1]), string(p))
		}
		if _, found := slices.BinarySearchFunc(entries, p, func(e Entry, p Path) int { return strings.Compare(string(e.Path), string(p)) }); found {
			return fmt.Errorf("path %q is both removed and listed", string(p))
		}
	}
	return nil
}

// ChangesOf returns all the changes of the last of cps, which must be
// checkpoints 1, 2, … of one session in order (as VerifyChain, or
// ReadCheckpoint for each, gives them): each checkpoint that lists a
// difference is applied to the changes of the one it names, and every
// root on the way is checked. A checkpoint naming another than the last
// one that walked before it is ErrChain; a list without its checkpoint's
// root is ErrNotVerified. It costs one merge and one MerkleRoot per
// checkpoint that walked.
func ChangesOf(cps []*Checkpoint) ([]Entry, error) {
	var r resolver
	for i, c := range cps {
		if c.Seq != uint64(i+1) {
			return nil, fmt.Errorf("%w: checkpoint %d of the chain says it is checkpoint %d", ErrChain, i+1, c.Seq)
		}
		if err := r.next(c); err != nil {
			return nil, err
		}
	}
	return r.list, nil
}

// resolver follows a chain: the changes of the last checkpoint that
// walked, and its seq and root.
type resolver struct {
	seq  uint64
	root []byte
	list []Entry
}

// next resolves checkpoint c, the next of the chain.
func (r *resolver) next(c *Checkpoint) error {
	switch {
	case c.Unchanged:
		if c.SameAs != r.seq {
			return fmt.Errorf("%w: checkpoint %d repeats checkpoint %d, not %d, the last that walked", ErrChain, c.Seq, c.SameAs, r.seq)
		}
		if !bytes.Equal(c.Root, r.root) || c.Count != uint64(len(r.list)) {
			return ErrNotVerified
		}
		return nil
	case c.Base != 0 && c.Base != r.seq:
		return fmt.Errorf("%w: checkpoint %d lists its difference from checkpoint %d, not %d, the last that walked", ErrChain, c.Seq, c.Base, r.seq)
	}
	list := c.Entries
	if c.Base != 0 {
		list = applyDelta(r.list, c.Entries, c.Removed)
	}
	root, err := MerkleRoot(list)
	if err != nil || !bytes.Equal(root, c.Root) || uint64(len(list)) != c.Count {
		return ErrNotVerified
	}
	r.seq, r.root, r.list = c.Seq, c.Root, list
	return nil
}

// applyDelta merges base (sorted by path bytes) with the entries that
// replace or join it and the paths removed from it.
func applyDelta(base, changed []Entry, removed []Path) []Entry {
	out := make([]Entry, 0, len(base)+len(changed))
	j, k := 0, 0
	for i := 0; i < len(base) || j < len(changed); {
		switch {
		case j < len(changed) && (i == len(base) || changed[j].Path <= base[i].Path):
			if i < len(base) && changed[j].Path == base[i].Path {
				i++
			}
			out = append(out, changed[j])
			j++
		default:
			for k < len(removed) && removed[k] < base[i].Path {
				k++
			}
			if k == len(removed) || removed[k] != base[i].Path {
				out = append(out, base[i])
			}
			i++
		}
	}
	return out
}

// CheckpointLeaf returns the log leaf hash of c: the RFC 6962 leaf hash
// of "layerseal/checkpoint/v1" 0x00 followed by the canonical JSON of
// every predicate member but changes, removed and log.
func CheckpointLeaf(c *Checkpoint) ([]byte, error) {
	b, err := canonicalJSON(c.body())
	if err != nil {
		return nil, fmt.Errorf("checkpoint leaf: %w", err)
	}
	return leafHash(append([]byte("layerseal/checkpoint/v1\x00"), b...)), nil
}

// CheckpointLog is the append-only log of one session's checkpoints. It
// holds one 32-byte leaf hash per checkpoint.
type CheckpointLog struct {
	leaves [][]byte
	last   *Checkpoint // the last checkpoint that listed its changes
}

// Size is the number of checkpoints appended.
func (l *CheckpointLog) Size() uint64 { return uint64(len(l.leaves)) }

// Append signs c as the log's next checkpoint and returns its envelope
// file bytes. It sets c.Seq, KeyID, Complete, the log head and both
// proofs, and:
//   - for an unchanged checkpoint, Root, Count and Incomplete, copied from
//     checkpoint SameAs, which must be the last one that walked;
//   - for one that lists all its changes (Base 0), Count, and Root from
//     its entries unless the caller set it (VerifyCheckpoint checks it);
//   - for one that lists the difference from checkpoint Base (the last
//     one that walked), nothing: the caller sets Root and Count of all
//     the changes, which ChangesOf checks.
//
// It costs encoding, MerkleRoot of the entries when it computes Root, and
// O(log n) hashes per proof node over n checkpoints.
func (l *CheckpointLog) Append(s *Signer, c *Checkpoint) ([]byte, error) {
	if s == nil {
		return nil, errors.New("sign checkpoint: no signer")
	}
	c.Seq = l.Size() + 1
	c.KeyID = s.KeyID()
	switch {
	case c.Unchanged:
		if l.last == nil || c.SameAs != l.last.Seq {
			return nil, fmt.Errorf("sign checkpoint: unchanged since %d, but the last full checkpoint is not that one", c.SameAs)
		}
		c.Root, c.Count = l.last.Root, l.last.Count
		c.Incomplete = l.last.Incomplete
		c.Entries, c.Removed, c.Base = nil, nil, 0
	case c.Base == 0:
		if c.Root == nil {
			root, err := MerkleRoot(c.Entries)
			if err != nil {
				return nil, fmt.Errorf("sign checkpoint: %w", err)
			}
			c.Root = root
		}
		c.Count, c.SameAs, c.Removed = uint64(len(c.Entries)), 0, nil
	default:
		if l.last == nil || c.Base != l.last.Seq {
			return nil, fmt.Errorf("sign checkpoint: difference from %d, but the last full checkpoint is not that one", c.Base)
		}
		c.SameAs = 0
	}
	c.Complete = len(c.Incomplete) == 0
	c.Log = TreeHead{Size: c.Seq, Root: make([]byte, 32)} // validated below; set after the leaf
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	leaf, err := CheckpointLeaf(c)
	if err != nil {
		return nil, err
	}
	leaves := append(l.leaves[:len(l.leaves):len(l.leaves)], leaf)
	c.Log.Root = logRoot(leaves)
	if c.Inclusion, err = inclusionProof(leaves, c.Seq-1); err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	if c.Consistency, err = ConsistencyProof(leaves, c.Seq-1, c.Seq); err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	// validate has refused every value without one spelling, so the
	// encoding is canonical and reads back as c (a test proves it);
	// unlike SignStatement, which runs once, Append does not parse it again.
	roomy, err := makeInToto(StatementSubject, hex.EncodeToString(c.Root), CheckpointPredicateType, c.toJSON(),
		payloadHint(len(c.Entries)+len(c.Removed), len(c.Incomplete)))
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	env, err := sealInPlace(s, roomy)
	if err != nil {
		return nil, err
	}
	l.leaves = leaves
	if !c.Unchanged {
		// Keep only what an unchanged checkpoint repeats, not the entries.
		l.last = &Checkpoint{Seq: c.Seq, Root: c.Root, Count: c.Count, Incomplete: c.Incomplete}
	}
	return env, nil
}

// Leaves returns a copy of the log's leaf hashes, in order.
func (l *CheckpointLog) Leaves() [][]byte { return append([][]byte(nil), l.leaves...) }

func parseCheckpointPayload(payload []byte) (*Checkpoint, error) {
	it, err := parseInToto[checkpointJSON](payload, CheckpointPredicateType)
	if err != nil {
		return nil, err
	}
	c, err := it.Predicate.fromJSON()
	if err != nil {
		return nil, malformed("checkpoint: %v", err)
	}
	if err := c.validate(); err != nil {
		return nil, malformed("checkpoint: %v", err)
	}
	if err := checkSubject(it.Subject[0], "checkpoint", c.Root); err != nil {
		return nil, err
	}
	return c, nil
}

// VerifyCheckpoint verifies one checkpoint's envelope file with pub, as
// strictly as VerifyStatement, and returns it: signature and key, strict
// one-spelling JSON, values, the Merkle root of its changes when it
// lists them all (see ChangesOf for the others), and the inclusion of its
// own leaf in the log head it carries. Whether the log before it is intact takes the other
// checkpoints: see VerifyChain.
func VerifyCheckpoint(env []byte, pub PublicKey) (*Checkpoint, error) {
	payload, err := open(env, MaxCheckpointSize, pub)
	if err != nil {
		return nil, err
	}
	c, err := parseCheckpointPayload(payload)
	if err != nil {
		return nil, err
	}
	if c.KeyID != KeyID(pub) {
		return nil, ErrNotVerified
	}
	if !c.Unchanged && c.Base == 0 {
		root, err := MerkleRoot(c.Entries)
		if err != nil || !bytes.Equal(root, c.Root) {
			return nil, ErrNotVerified
		}
	}
	leaf, err := CheckpointLeaf(c)
	if err != nil {
		return nil, err
	}
	if err := verifyInclusion(leaf, c.Seq-1, c.Log.Size, c.Inclusion, c.Log.Root); err != nil {
		return nil, err
	}
	return c, nil
}

// ReadCheckpoint parses a checkpoint envelope as strictly as
// VerifyCheckpoint but without checking its signature, for showing it.
func ReadCheckpoint(env []byte) (*Checkpoint, error) {
	if len(env) > MaxCheckpointSize {
		return nil, malformed("envelope of %d bytes is over the limit of %d", len(env), MaxCheckpointSize)
	}
	var e envelope
	if err := strictJSON(env, &e, "envelope"); err != nil {
		return nil, err
	}
	if e.PayloadType != PayloadType {
		return nil, malformed("unsupported payload type %q", e.PayloadType)
	}
	if err := canonicalCheck(env, &e, true, "envelope"); err != nil {
		return nil, err
	}
	return parseCheckpointPayload(e.Payload)
}

// ErrChain is wrapped by VerifyChain's errors about the shape of a chain:
// a missing, repeated or reordered checkpoint, or checkpoints of
// different sessions. A chain whose hashes do not agree gives
// ErrNotVerified.
var ErrChain = errors.New("checkpoint chain broken")

// VerifyChain verifies a session's checkpoints, given as their envelope
// files in order (checkpoint 1 first), with pub: each one as
// VerifyCheckpoint does; that their seqs are 1, 2, … with nothing
// missing; that they share session, launch record, key and workspace and
// were taken in order; that each unchanged one repeats the root, count
// and reasons of the checkpoint it names, and each that lists a
// difference resolves to its root (ChangesOf); that each one's egress
// records extend the one's before (EgressExtends); that each log head is the
// root of the leaves so far, recomputed from the checkpoints themselves;
// and every consistency proof between consecutive heads. With launchEnv
// not nil the checkpoints must be bound to that launch record. It returns
// the checkpoints and all the changes of the last one.
func VerifyChain(envs [][]byte, pub PublicKey, launchEnv []byte) ([]*Checkpoint, []Entry, error) {
	var out []*Checkpoint
	var r resolver
	var leaves [][]byte
	var launch []byte
	if launchEnv != nil {
		if _, err := VerifyLaunch(launchEnv, pub); err != nil {
			return nil, nil, fmt.Errorf("launch record: %w", err)
		}
		launch = sha(launchEnv)
	}
	for i, env := range envs {
		c, err := VerifyCheckpoint(env, pub)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
		if c.Seq != uint64(i+1) {
			return nil, nil, fmt.Errorf("%w: checkpoint %d of the chain says it is checkpoint %d", ErrChain, i+1, c.Seq)
		}
		if launch != nil && !bytes.Equal(c.Launch, launch) {
			return nil, nil, ErrNotVerified
		}
		if i > 0 {
			p := out[0]
			if c.SessionID != p.SessionID || !bytes.Equal(c.Launch, p.Launch) || c.Workspace != p.Workspace {
				return nil, nil, fmt.Errorf("%w: checkpoint %d is of session %s, checkpoint 1 of %s", ErrChain, i+1, c.SessionID, p.SessionID)
			}
			if c.Taken.Before(out[i-1].Taken) {
				return nil, nil, fmt.Errorf("%w: checkpoint %d was taken before checkpoint %d", ErrChain, i+1, i)
			}
			if err := EgressExtends(out[i-1].Egress, c.Egress); err != nil {
				return nil, nil, fmt.Errorf("%w: checkpoint %d: %v", ErrChain, i+1, err)
			}
		}
		if err := r.next(c); err != nil {
			return nil, nil, fmt.Errorf("checkpoint %d: %w", i+1, err)
		}
		if c.Unchanged && !sameReasons(out[c.SameAs-1].Incomplete, c.Incomplete) {
			return nil, nil, ErrNotVerified
		}
		leaf, err := CheckpointLeaf(c)
		if err != nil {
			return nil, nil, err
		}
		leaves = append(leaves, leaf)
		if !bytes.Equal(logRoot(leaves), c.Log.Root) {
			return nil, nil, ErrNotVerified
		}
		if i > 0 {
			if err := VerifyConsistency(uint64(i), c.Seq, c.Consistency, out[i-1].Log.Root, c.Log.Root); err != nil {
				return nil, nil, err
			}
		}
		out = append(out, c)
	}
	return out, r.list, nil
}

// CheckStatementHead checks that the final statement st is bound to the
// chain whose last checkpoint's envelope file is last (nil when the
// session made none): Statement.CheckpointHead must be its SHA-256 and the
// session the same, or ErrNotVerified; and the statement's egress records
// must extend the checkpoint's (EgressExtends), or ErrChain.
func CheckStatementHead(st *Statement, last []byte, lastCP *Checkpoint) error {
	if last == nil {
		if st.CheckpointHead != nil {
			return ErrNotVerified
		}
		return nil
	}
	if !bytes.Equal(st.CheckpointHead, sha(last)) || lastCP == nil || lastCP.SessionID != st.SessionID ||
		!bytes.Equal(lastCP.Launch, st.Launch) {
		return ErrNotVerified
	}
	if err := EgressExtends(lastCP.Egress, st.Egress); err != nil {
		return fmt.Errorf("%w: the statement: %v", ErrChain, err)
	}
	return nil
}

func sameReasons(a, b []Reason) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
