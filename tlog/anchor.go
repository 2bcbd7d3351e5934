package tlog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/sync/errgroup"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/atomicfile"
)

// witnessDir, in a log's directory, holds each witness's newest
// cosigned checkpoint, named by the witness key's hash (WitnessFile).
const witnessDir = "witness"

// WitnessFile is where, below a log's root, a witness publishes its newest
// cosigned checkpoint.
func WitnessFile(w note.Verifier) string {
	return fmt.Sprintf("%s/%08x", witnessDir, w.KeyHash())
}

// Anchored heads: what Anchor did with each.
type AnchorResult struct {
	Head     string // the head's file
	Receipt  string // its receipt's file
	Index    uint64
	Appended bool // false: it had a receipt already, now proven anew
	Size     uint64
	Cosigned int // cosignatures on the receipt's checkpoint (unverified count)
}

// Heads lists the signed heads of a session's output dir: the statement's
// and each checkpoint's, in that order.
func Heads(out string) ([]string, error) {
	st := filepath.Join(out, attest.HeadFile("statement.json"))
	if _, err := os.Stat(st); err != nil {
		return nil, fmt.Errorf("%q holds no statement head (%s): is it a run's output dir?", out, filepath.Base(st))
	}
	cps, err := filepath.Glob(filepath.Join(out, "checkpoints", "[0-9]*.head.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(cps)
	return append([]string{st}, cps...), nil
}

// Anchor appends each head of the session in out to l (a head that has a
// receipt for itself is not appended again, only proven anew against the
// newest checkpoint, so its receipt gains cosignatures) and writes each
// head's receipt beside it. An entry is the head's envelope file exactly.
func Anchor(ctx context.Context, l Log, out string) ([]AnchorResult, error) {
	files, err := Heads(out)
	if err != nil {
		return nil, err
	}
	res := make([]AnchorResult, len(files))
	g, gctx := errgroup.WithContext(ctx)
	for i, f := range files {
		g.Go(func() error {
			r, err := anchorOne(gctx, l, f)
			if err != nil {
				return err
			}
			res[i] = *r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return res, nil
}

func anchorOne(ctx context.Context, l Log, file string) (*AnchorResult, error) {
	entry, err := attest.ReadArtifact(file)
	if err != nil {
		return nil, err
	}
	if _, err := attest.ReadHead(entry); err != nil {
		return nil, fmt.Errorf("%s: %w (only a signed head goes into the log)", file, err)
	}
	sum := sha256.Sum256(entry)
	res := &AnchorResult{Head: file, Receipt: ReceiptFile(file)}
	if old, err := os.ReadFile(res.Receipt); err == nil {
		if r, err := ParseReceipt(old); err == nil && bytes.Equal(r.Entry, sum[:]) && r.Origin == l.Origin() {
			res.Index = r.Index
		} else {
			return nil, fmt.Errorf("%s is not a receipt of %s in this log: move it away to anchor the head anew", res.Receipt, file)
		}
	} else if errors.Is(err, fs.ErrNotExist) {
		if res.Index, err = l.Append(ctx, entry); err != nil {
			return nil, err
		}
		res.Appended = true
	} else {
		return nil, err
	}
	r, err := Prove(ctx, l, res.Index, entry)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(res.Receipt, r.Marshal(), 0o644); err != nil {
		return nil, err
	}
	cp, _ := OpenCheckpoint(r.Checkpoint, l.Verifier())
	res.Size = cp.Size
	n, _ := note.Open(r.Checkpoint, note.VerifierList(l.Verifier()))
	res.Cosigned = len(n.UnverifiedSigs)
	return res, nil
}

// Prove makes the receipt of entry, at index, against the log checkpoint
// that commits to it with the most signatures (the log's newest, or one
// that witnesses published cosigned; the newer on a tie).
func Prove(ctx context.Context, l Log, index uint64, entry []byte) (*Receipt, error) {
	cp, err := l.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	// The same checkpoint cosigned by several witnesses, each in a file
	// of its own: one note with every signature line.
	merged := map[string]*Checkpoint{}
	var order []string
	for _, c := range append([]*Checkpoint{cp}, l.Cosigned(ctx)...) {
		body, sigs := splitNote(c.Note)
		m, ok := merged[body]
		if !ok {
			m = &Checkpoint{Checkpoint: c.Checkpoint, Note: []byte(body + "\n")}
			merged[body], order = m, append(order, body)
		}
		for _, line := range sigs {
			if !bytes.Contains(m.Note[len(body)+1:], []byte(line)) {
				m.Note = append(m.Note, line...)
			}
		}
	}
	best, bestSigs := cp, 0
	for _, body := range order {
		c := merged[body]
		if c.Size <= index || c.Size > cp.Size {
			continue
		}
		n := sigCount(c.Note)
		if n > bestSigs || (n == bestSigs && c.Size > best.Size) {
			best, bestSigs = c, n
		}
	}
	if index >= best.Size {
		return nil, fmt.Errorf("log %q: entry %d is not in its checkpoint of size %d", l.Location(), index, best.Size)
	}
	p, err := l.Inclusion(ctx, index, best.Size)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(entry)
	r := &Receipt{Origin: l.Origin(), Index: index, Entry: sum[:], Proof: p, Checkpoint: best.Note}
	if _, err := VerifyReceipt(r, entry, l.Verifier(), nil, 0); err != nil {
		return nil, fmt.Errorf("log %q: the receipt made of its tiles does not verify: %w", l.Location(), err)
	}
	return r, nil
}

// splitNote splits a note into its text (ending in a newline) and its
// signature lines (each with its newline).
func splitNote(msg []byte) (string, []string) {
	i := bytes.Index(msg, []byte("\n\n"))
	if i < 0 {
		return string(msg), nil
	}
	var sigs []string
	for _, l := range bytes.SplitAfter(msg[i+2:], []byte("\n")) {
		if len(l) > 0 {
			sigs = append(sigs, string(l))
		}
	}
	return string(msg[:i+1]), sigs
}

func sigCount(msg []byte) int {
	i := bytes.Index(msg, []byte("\n\n"))
	if i < 0 {
		return 0
	}
	return bytes.Count(msg[i+2:], []byte("\n"))
}

// Cosigned returns the cosigned checkpoints witnesses published in the
// log's directory that verify under the log's key (a URL lists none).
func (r *Reader) Cosigned(ctx context.Context) []*Checkpoint {
	if isURL(r.loc) {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(r.loc, witnessDir, "*"))
	var out []*Checkpoint
	for _, f := range files {
		b, err := readBounded(f)
		if err != nil {
			continue
		}
		if c, err := OpenCheckpoint(b, r.verifier); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// Verifier checks the log's signature on its checkpoints.
func (r *Reader) Verifier() note.Verifier { return r.verifier }
