package tlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

// ReceiptFormat is the format tag of a log receipt.
const ReceiptFormat = "https://layerseal.dev/log-receipt/v1"

// MaxReceiptSize bounds a receipt file.
const MaxReceiptSize = 256 << 10

// Receipt says where an entry is in a log: its index, its inclusion proof
// and the checkpoint (a signed note, cosignatures included) it is proven
// against. It is kept beside the head it is the receipt of
// (ReceiptFile), and holds nothing the head does not disclose.
//
// Its file is canonical JSON followed by one newline, an object with
// exactly these members, in this order:
//
//	format        "https://layerseal.dev/log-receipt/v1"
//	origin        the log's origin (its key's name)
//	index         the entry's index, decimal string
//	entry_sha256  SHA-256 of the entry (the head's envelope file), lowercase hex
//	proof         array of the inclusion proof's hashes, lowercase hex, leaf to root
//	checkpoint    the checkpoint note, text and signature lines
type Receipt struct {
	Origin     string
	Index      uint64
	Entry      []byte // SHA-256 of the entry
	Proof      [][]byte
	Checkpoint []byte
}

type receiptJSON struct {
	Format     string   `json:"format"`
	Origin     string   `json:"origin"`
	Index      string   `json:"index"`
	Entry      string   `json:"entry_sha256"`
	Proof      []string `json:"proof"`
	Checkpoint string   `json:"checkpoint"`
}

// ReceiptFile is the receipt's file name beside a head's:
// statement.head.json → statement.log-receipt.json.
func ReceiptFile(headFile string) string {
	const h = ".head.json"
	if n := len(headFile) - len(h); n >= 0 && headFile[n:] == h {
		return headFile[:n] + ".log-receipt.json"
	}
	return headFile + ".log-receipt.json"
}

// Marshal returns the receipt's file bytes.
func (r *Receipt) Marshal() []byte {
	j := receiptJSON{Format: ReceiptFormat, Origin: r.Origin, Index: strconv.FormatUint(r.Index, 10),
		Entry: hex.EncodeToString(r.Entry), Proof: make([]string, len(r.Proof)), Checkpoint: string(r.Checkpoint)}
	for i, p := range r.Proof {
		j.Proof[i] = hex.EncodeToString(p)
	}
	b, err := json.Marshal(j, json.Deterministic(true))
	if err != nil {
		panic(err) // strings and a slice of strings always encode
	}
	return append(b, '\n')
}

// ParseReceipt decodes a receipt file strictly: unknown, duplicate or
// case-variant members, another format tag, a value out of its form,
// trailing data or any spelling but the canonical one are refused.
func ParseReceipt(b []byte) (*Receipt, error) {
	if len(b) > MaxReceiptSize {
		return nil, fmt.Errorf("receipt over %d bytes", MaxReceiptSize)
	}
	var j receiptJSON
	err := json.Unmarshal(b, &j, json.RejectUnknownMembers(true), json.MatchCaseInsensitiveNames(false),
		jsontext.AllowDuplicateNames(false), jsontext.AllowInvalidUTF8(false))
	if err != nil {
		return nil, fmt.Errorf("receipt: %v", err)
	}
	if j.Format != ReceiptFormat {
		return nil, fmt.Errorf("receipt of format %q (this version reads %q)", j.Format, ReceiptFormat)
	}
	r := &Receipt{Origin: j.Origin, Checkpoint: []byte(j.Checkpoint)}
	if r.Index, err = strconv.ParseUint(j.Index, 10, 64); err != nil {
		return nil, fmt.Errorf("receipt: index %q is not a decimal number", j.Index)
	}
	if r.Entry, err = hex32(j.Entry); err != nil {
		return nil, fmt.Errorf("receipt: entry_sha256: %v", err)
	}
	if len(j.Proof) > 64 {
		return nil, fmt.Errorf("receipt: a proof of %d hashes", len(j.Proof))
	}
	for _, s := range j.Proof {
		h, err := hex32(s)
		if err != nil {
			return nil, fmt.Errorf("receipt: proof: %v", err)
		}
		r.Proof = append(r.Proof, h)
	}
	if !bytes.Equal(r.Marshal(), b) {
		return nil, fmt.Errorf("receipt is not in its one valid encoding")
	}
	return r, nil
}

func hex32(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 || hex.EncodeToString(b) != s {
		return nil, fmt.Errorf("%q is not 64 lowercase hex digits", s)
	}
	return b, nil
}

// Anchored is what a receipt that verified proves.
type Anchored struct {
	Checkpoint *Checkpoint
	Index      uint64
	Witnesses  []string // names of the given witnesses that cosigned
}

// VerifyReceipt checks that entry is included, at the receipt's index, in
// its checkpoint, that the log's key signed that checkpoint, and that at
// least min of witnesses (cosignature/v1 verifiers, each counted once)
// cosigned it. Any failure wraps ErrNotVerified.
func VerifyReceipt(r *Receipt, entry []byte, logKey note.Verifier, witnesses []note.Verifier, min int) (*Anchored, error) {
	sum := sha256.Sum256(entry)
	if !bytes.Equal(sum[:], r.Entry) {
		return nil, fmt.Errorf("%w: the receipt is of another entry than this head", ErrNotVerified)
	}
	if r.Origin != logKey.Name() {
		return nil, fmt.Errorf("%w: the receipt is of log %q, not of log %q (the --log-key given)", ErrNotVerified, r.Origin, logKey.Name())
	}
	cp, err := OpenCheckpoint(r.Checkpoint, logKey)
	if err != nil {
		return nil, err
	}
	if r.Index >= cp.Size {
		return nil, fmt.Errorf("%w: index %d is not in a checkpoint of size %d", ErrNotVerified, r.Index, cp.Size)
	}
	leaf := rfc6962.DefaultHasher.HashLeaf(entry)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.Index, cp.Size, leaf, r.Proof, cp.Hash); err != nil {
		return nil, fmt.Errorf("%w: the inclusion proof of entry %d does not lead to the checkpoint's root (size %d)", ErrNotVerified, r.Index, cp.Size)
	}
	a := &Anchored{Checkpoint: cp, Index: r.Index}
	a.Witnesses = Cosigners(r.Checkpoint, witnesses)
	if len(a.Witnesses) < min {
		return nil, fmt.Errorf("%w: %d of the given witnesses cosigned the receipt's checkpoint (size %d), %d wanted", ErrNotVerified, len(a.Witnesses), cp.Size, min)
	}
	return a, nil
}

// Cosigners returns the names of witnesses whose signature on the note
// msg verifies, each once.
func Cosigners(msg []byte, witnesses []note.Verifier) []string {
	var names []string
	seen := map[string]bool{}
	for _, w := range witnesses {
		n, err := note.Open(msg, note.VerifierList(w))
		if err != nil || len(n.Sigs) == 0 {
			continue
		}
		id := fmt.Sprintf("%s+%08x", w.Name(), w.KeyHash())
		if !seen[id] {
			seen[id] = true
			names = append(names, w.Name())
		}
	}
	return names
}
