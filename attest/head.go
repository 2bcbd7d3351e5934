package attest

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
)

// HeadPredicateType is the format tag of a signed head.
const HeadPredicateType = "https://layerseal.dev/head/v1"

// MaxHeadSize bounds a head's envelope file. A head lists no changes, only
// the reasons, so it is small unless a session was incomplete in very many
// places.
const MaxHeadSize = 16 << 20

// The kinds of artifact a head is the head of.
const (
	HeadKindStatement  = "statement"
	HeadKindCheckpoint = "checkpoint"
)

// HeadFile is the file name of the head beside a statement or checkpoint
// named file: statement.json → statement.head.json, 000001.json →
// 000001.head.json.
func HeadFile(file string) string {
	if n := len(file) - len(".json"); n >= 0 && file[n:] == ".json" {
		return file[:n] + ".head.json"
	}
	return file + ".head.json"
}

// Head is the small signed summary of a statement or a checkpoint: what a
// proof of one path is checked against. It commits to the change set
// through its Merkle root and size and lists no entry, so it discloses no
// changed path but those of its reasons (and the user's own excluded
// subtrees, which are policy, not changes). It is derived with HeadOf or
// HeadOfCheckpoint from an artifact that verified, and signed with the
// session's key by SignHead.
//
// A head's envelope file is a DSSE envelope like a statement's (see
// VerifyStatement), whose payload is an in-toto Statement v1, canonical
// JSON, byte for byte:
//
//	{"_type":"https://in-toto.io/Statement/v1",
//	 "subject":[{"name":"workspace-changes","digest":{"sha256":ROOT}}],
//	 "predicateType":"https://layerseal.dev/head/v1",
//	 "predicate":PREDICATE}
//
// (without the line breaks), ROOT being the root member below, and
// PREDICATE an object with exactly these members, in this order:
//
//	kind             "statement" or "checkpoint"
//	session_id       32 lowercase hex digits
//	launch_sha256    SHA-256 of the launch record's envelope file, lowercase hex
//	key_id           key ID of the signing key (as in a statement)
//	alg              signature algorithm of that key, the one its key ID
//	                 names: "ed25519", "ml-dsa-65" or "hybrid"
//	seq              decimal string, the checkpoint's seq; omitted for a statement
//	root             Merkle root of the observed change set, lowercase hex
//	count            its number of entries, decimal string
//	applied_root     Merkle root of the change set left after the sweep (a
//	                 statement's applied_root; a checkpoint's root)
//	applied_count    its number of entries (a checkpoint's count)
//	complete         bool, true exactly when incomplete is empty
//	incomplete       array of {"code", "path" (omitted when empty)}, the
//	                 artifact's reasons in its order, without their details
//	checkpoint_head  for a statement, its checkpoint_head (SHA-256 of the
//	                 last checkpoint's envelope file), omitted when it has
//	                 none; for a checkpoint, the root of the checkpoint log
//	                 that ends with it (its log.root)
//	excluded         array of paths: a statement's excluded subtrees (the
//	                 user's declared exclusions, summarized rather than
//	                 itemized), sorted; omitted when empty, always for a
//	                 checkpoint
//
// The reasons' details are left out because they are free text that may
// name paths; codes and paths are what a verifier of a proof needs to tell
// whether a reason covers the path proven. The envelope file is this
// canonical JSON followed by one newline, as for every artifact.
type Head struct {
	Kind         string // HeadKindStatement or HeadKindCheckpoint
	SessionID    string
	Launch       []byte
	KeyID        string
	Alg          string
	Seq          uint64 // of a checkpoint; 0 for a statement
	Root         []byte
	Count        uint64
	AppliedRoot  []byte
	AppliedCount uint64
	Complete     bool
	Incomplete   []Reason // Detail always empty
	// CheckpointHead: a statement's CheckpointHead (nil when it has
	// none), or the log root of a checkpoint.
	CheckpointHead []byte
	// Excluded are the roots of a statement's excluded subtrees: changes
	// under them are not leaves, so nothing is proven of a path there.
	Excluded []Path
}

type headJSON struct {
	Kind           string           `json:"kind"`
	SessionID      string           `json:"session_id"`
	Launch         string           `json:"launch_sha256"`
	KeyID          string           `json:"key_id"`
	Alg            string           `json:"alg"`
	Seq            uint64           `json:"seq,omitzero,string"`
	Root           string           `json:"root"`
	Count          uint64           `json:"count,string"`
	AppliedRoot    string           `json:"applied_root"`
	AppliedCount   uint64           `json:"applied_count,string"`
	Complete       bool             `json:"complete"`
	Incomplete     []headReasonJSON `json:"incomplete"`
	CheckpointHead string           `json:"checkpoint_head,omitempty"`
	Excluded       []Path           `json:"excluded,omitempty"`
}

type headReasonJSON struct {
	Code Code `json:"code"`
	Path Path `json:"path,omitempty"`
}

// headReasons returns rs without their details.
func headReasons(rs []Reason) []Reason {
	var out []Reason
	for _, r := range rs {
		out = append(out, Reason{Code: r.Code, Path: r.Path})
	}
	return out
}

// HeadOf returns the head of st, a statement that verified (or that
// SignStatement signed).
func HeadOf(st *Statement) *Head {
	return &Head{
		Kind: HeadKindStatement, SessionID: st.SessionID, Launch: clone(st.Launch), KeyID: st.KeyID, Alg: algOf(st.KeyID),
		Root: clone(st.Root), Count: st.Count, AppliedRoot: clone(st.AppliedRoot), AppliedCount: st.AppliedCount,
		Complete: st.Complete, Incomplete: headReasons(st.Incomplete), CheckpointHead: clone(st.CheckpointHead),
		Excluded: excludedPaths(st.Excluded),
	}
}

func excludedPaths(xs []Excluded) []Path {
	var out []Path
	for _, x := range xs {
		out = append(out, x.Path)
	}
	return out
}

// HeadOfCheckpoint returns the head of c, a checkpoint that verified (or
// that CheckpointLog.Append signed).
func HeadOfCheckpoint(c *Checkpoint) *Head {
	return &Head{
		Kind: HeadKindCheckpoint, SessionID: c.SessionID, Launch: clone(c.Launch), KeyID: c.KeyID, Alg: algOf(c.KeyID),
		Seq: c.Seq, Root: clone(c.Root), Count: c.Count, AppliedRoot: clone(c.Root), AppliedCount: c.Count,
		Complete: c.Complete, Incomplete: headReasons(c.Incomplete), CheckpointHead: clone(c.Log.Root),
	}
}

// algOf returns the algorithm key ID id names, "" if it names none.
func algOf(id string) string {
	alg, _ := keyIDAlg(id)
	return alg
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func (h *Head) toJSON() *headJSON {
	j := &headJSON{
		Kind: h.Kind, SessionID: h.SessionID, Launch: hexOrEmpty(h.Launch), KeyID: h.KeyID, Alg: h.Alg, Seq: h.Seq,
		Root: hexOrEmpty(h.Root), Count: h.Count, AppliedRoot: hexOrEmpty(h.AppliedRoot), AppliedCount: h.AppliedCount,
		Complete: h.Complete, Incomplete: make([]headReasonJSON, len(h.Incomplete)), CheckpointHead: hexOrEmpty(h.CheckpointHead),
		Excluded: h.Excluded,
	}
	for i, r := range h.Incomplete {
		j.Incomplete[i] = headReasonJSON{Code: r.Code, Path: r.Path}
	}
	return j
}

func (j *headJSON) fromJSON() (*Head, error) {
	h := &Head{Kind: j.Kind, SessionID: j.SessionID, KeyID: j.KeyID, Alg: j.Alg, Seq: j.Seq,
		Count: j.Count, AppliedCount: j.AppliedCount, Complete: j.Complete, Excluded: j.Excluded}
	var err error
	if h.Launch, err = parseHex("launch digest", j.Launch); err != nil {
		return nil, err
	}
	if h.Root, err = parseHex("root", j.Root); err != nil {
		return nil, err
	}
	if h.AppliedRoot, err = parseHex("applied root", j.AppliedRoot); err != nil {
		return nil, err
	}
	if j.CheckpointHead != "" {
		if h.CheckpointHead, err = parseHex("checkpoint head", j.CheckpointHead); err != nil {
			return nil, err
		}
	}
	for _, r := range j.Incomplete {
		h.Incomplete = append(h.Incomplete, Reason{Code: r.Code, Path: r.Path})
	}
	return h, nil
}

// validate checks the values of h.
func (h *Head) validate() error {
	switch h.Kind {
	case HeadKindStatement:
		if h.Seq != 0 {
			return fmt.Errorf("statement head with seq %d", h.Seq)
		}
		if h.CheckpointHead != nil && len(h.CheckpointHead) != 32 {
			return fmt.Errorf("checkpoint head of %d bytes", len(h.CheckpointHead))
		}
	case HeadKindCheckpoint:
		if h.Seq == 0 {
			return errors.New("checkpoint head without a seq")
		}
		if len(h.CheckpointHead) != 32 {
			return fmt.Errorf("checkpoint log root of %d bytes", len(h.CheckpointHead))
		}
		if !bytes.Equal(h.Root, h.AppliedRoot) || h.Count != h.AppliedCount {
			return errors.New("checkpoint head whose applied change set is not its change set")
		}
		if h.Excluded != nil {
			return errors.New("checkpoint head with excluded subtrees")
		}
	default:
		return fmt.Errorf("unknown head kind %q", h.Kind)
	}
	if err := checkSessionID(h.SessionID); err != nil {
		return err
	}
	if len(h.Launch) != 32 {
		return fmt.Errorf("launch digest of %d bytes", len(h.Launch))
	}
	alg, err := keyIDAlg(h.KeyID)
	if err != nil {
		return err
	}
	if h.Alg != alg {
		return fmt.Errorf("signature algorithm %q, but key id %q names %q", h.Alg, h.KeyID, alg)
	}
	if len(h.Root) != 32 || len(h.AppliedRoot) != 32 {
		return fmt.Errorf("roots of %d and %d bytes", len(h.Root), len(h.AppliedRoot))
	}
	if h.Complete != (len(h.Incomplete) == 0) {
		return fmt.Errorf("complete is %t with %d reasons", h.Complete, len(h.Incomplete))
	}
	for i, p := range h.Excluded {
		if err := p.Valid(); err != nil {
			return fmt.Errorf("excluded: %w", err)
		}
		if i > 0 && h.Excluded[i-1] >= p {
			return fmt.Errorf("excluded paths %q and %q not sorted and unique", string(h.Excluded[i-1]), string(p))
		}
	}
	for i := range h.Incomplete {
		if h.Incomplete[i].Detail != "" {
			return fmt.Errorf("reason %q with a detail", string(h.Incomplete[i].Code))
		}
		if err := h.Incomplete[i].Valid(); err != nil {
			return err
		}
	}
	return nil
}

// SignHead sets h.KeyID and h.Alg to the signer's key ID and algorithm,
// checks h, and returns the envelope file bytes of the signed head. h is
// normally HeadOf or HeadOfCheckpoint of an artifact the same signer
// signed.
func SignHead(s *Signer, h *Head) ([]byte, error) {
	if s == nil {
		return nil, errors.New("sign head: no signer")
	}
	h.KeyID, h.Alg = s.KeyID(), s.Alg()
	if err := h.validate(); err != nil {
		return nil, fmt.Errorf("sign head: %w", err)
	}
	roomy, err := makeInToto(StatementSubject, hex.EncodeToString(h.Root), HeadPredicateType, h.toJSON(), payloadHint(0, len(h.Incomplete)))
	if err != nil {
		return nil, fmt.Errorf("sign head: %w", err)
	}
	if _, err := parseHeadPayload(roomy[payloadRoom:]); err != nil {
		return nil, fmt.Errorf("sign head: %w", err)
	}
	return sealInPlace(s, roomy)
}

// VerifyHead verifies a head's envelope file with pub and returns the
// head, as strictly as VerifyStatement: size (at most MaxHeadSize),
// envelope, signature and key ID, strict one-spelling JSON of the format
// HeadPredicateType, every value, and the subject's digest being the root.
// A failed cryptographic check returns ErrNotVerified, anything else
// refused an error wrapping ErrMalformed.
func VerifyHead(env []byte, pub PublicKey) (*Head, error) {
	payload, err := open(env, MaxHeadSize, pub)
	if err != nil {
		return nil, err
	}
	h, err := parseHeadPayload(payload)
	if err != nil {
		return nil, err
	}
	if h.KeyID != KeyID(pub) {
		return nil, ErrNotVerified
	}
	return h, nil
}

// ReadHead parses a head's envelope file as strictly as VerifyHead but
// without checking its signature, for showing it or proving against it.
func ReadHead(env []byte) (*Head, error) {
	e, err := parseEnvelope(env, MaxHeadSize)
	if err != nil {
		return nil, err
	}
	return parseHeadPayload(e.Payload)
}

func parseHeadPayload(payload []byte) (*Head, error) {
	it, err := parseInToto[headJSON](payload, HeadPredicateType)
	if err != nil {
		return nil, err
	}
	h, err := it.Predicate.fromJSON()
	if err != nil {
		return nil, malformed("head: %v", err)
	}
	if err := h.validate(); err != nil {
		return nil, malformed("head: %v", err)
	}
	if err := checkSubject(it.Subject[0], "head", h.Root); err != nil {
		return nil, err
	}
	return h, nil
}

// Equal reports whether h and o are the same head.
func (h *Head) Equal(o *Head) bool {
	return h.Kind == o.Kind && h.SessionID == o.SessionID && bytes.Equal(h.Launch, o.Launch) &&
		h.KeyID == o.KeyID && h.Alg == o.Alg && h.Seq == o.Seq && bytes.Equal(h.Root, o.Root) &&
		h.Count == o.Count && bytes.Equal(h.AppliedRoot, o.AppliedRoot) && h.AppliedCount == o.AppliedCount &&
		h.Complete == o.Complete && sameReasons(h.Incomplete, o.Incomplete) &&
		bytes.Equal(h.CheckpointHead, o.CheckpointHead) && slices.Equal(h.Excluded, o.Excluded)
}
