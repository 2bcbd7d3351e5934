package tlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/layerseal/layerseal/internal/atomicfile"
	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

// ErrStateRolledBack is wrapped when a witness's state file is older than
// a checkpoint the same witness already cosigned and published.
var ErrStateRolledBack = errors.New("the witness's state file was rolled back")

// Cosigned is what one witness step did.
type Cosigned struct {
	Old, New  *Checkpoint // the state's checkpoint (nil at first use) and the log's
	Note      []byte      // New's note with the witness's cosignature added
	Published string      // where it was written in the log's directory ("" for a URL)
}

// Cosign is one step of the witness w (a cosignature/v1 signer) over the
// log r reads, with its state in the file state: it reads the log's
// newest checkpoint, checks it is consistent with the state's (the last
// checkpoint w cosigned; at first use, a missing file), cosigns it,
// replaces the state with it (never with a smaller one), and, when the log
// is a directory, publishes the cosigned checkpoint in it (WitnessFile).
// An inconsistent log is an *InconsistentError and nothing is signed. A
// state older than what w published in the log is ErrStateRolledBack.
func Cosign(ctx context.Context, r *Reader, w *fnote.Signer, state string) (*Cosigned, error) {
	wv := w.Verifier()
	var old *Checkpoint
	b, err := readBounded(state)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("witness state: %w", err)
	default:
		if old, err = openCosigned(b, r.verifier, wv); err != nil {
			return nil, fmt.Errorf("witness state %q: %w", state, err)
		}
	}
	// What this witness published in the log must not be newer than its
	// state: a state file put back to an older one would let a fork of
	// the log since then pass.
	if pub, err := r.get(ctx, WitnessFile(wv)); err == nil {
		p, err := openCosigned(pub, r.verifier, wv)
		if err != nil {
			return nil, fmt.Errorf("the cosigned checkpoint this witness published in the log: %w", err)
		}
		if old == nil || p.Size > old.Size {
			oldSize := uint64(0)
			if old != nil {
				oldSize = old.Size
			}
			return nil, fmt.Errorf("%w: it holds size %d, but this witness already cosigned size %d of this log (root %x): restore the newest state, or check the log by hand", ErrStateRolledBack, oldSize, p.Size, p.Hash)
		}
		if err := r.consistent(ctx, p, old); err != nil {
			return nil, fmt.Errorf("%w: it does not extend the checkpoint this witness published (%v)", ErrStateRolledBack, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read what this witness published in the log: %w", err)
	}
	cur, err := r.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if old != nil {
		if err := r.consistent(ctx, old, cur); err != nil {
			return nil, err
		}
	}
	n, err := note.Open(cur.Note, note.VerifierList(r.verifier))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotVerified, err)
	}
	n.UnverifiedSigs = nil // other witnesses' lines are theirs to vouch for
	signed, err := note.Sign(n, w)
	if err != nil {
		return nil, fmt.Errorf("cosign: %w", err)
	}
	res := &Cosigned{Old: old, New: cur, Note: signed}
	if old == nil || cur.Size > old.Size {
		if err := atomicfile.Write(state, signed, 0o644); err != nil {
			return nil, fmt.Errorf("witness state: %w", err)
		}
	}
	if !isURL(r.loc) {
		res.Published = filepath.Join(r.loc, WitnessFile(wv))
		if err := os.MkdirAll(filepath.Dir(res.Published), 0o755); err != nil {
			return nil, err
		}
		if err := atomicfile.Write(res.Published, signed, 0o644); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// openCosigned opens a checkpoint that both the log and the witness
// signed.
func openCosigned(b []byte, logKey, wv note.Verifier) (*Checkpoint, error) {
	cp, err := OpenCheckpoint(b, logKey)
	if err != nil {
		return nil, err
	}
	if len(Cosigners(b, []note.Verifier{wv})) == 0 {
		return nil, fmt.Errorf("%w: not cosigned by this witness's key", ErrNotVerified)
	}
	return cp, nil
}
