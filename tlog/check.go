package tlog

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/fsck"

	"github.com/layerseal/layerseal/attest"
)

// Report is what Check found in a log that checked out.
type Report struct {
	Checkpoint *Checkpoint
	// Heads counts the entries per signing key id, each entry being a
	// well-formed signed head (its signature is not checked: the log
	// does not know the sessions' keys).
	Heads map[string]uint64
	// Since is the size of the earlier checkpoint the log was shown
	// consistent with (0 when none was given).
	Since uint64
}

// KeyIDs returns the report's key ids, sorted.
func (r *Report) KeyIDs() []string {
	var ids []string
	for id := range r.Heads {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Check monitors the log r reads: it verifies the newest checkpoint,
// recomputes the whole tree from the entry bundles, compares every tile
// with what it recomputed and the root with the checkpoint's, and
// requires every entry to be a well-formed signed head. When since (a
// checkpoint note seen before) is given, it also checks the log is
// consistent with it. Failures of the log wrap ErrNotVerified.
func Check(ctx context.Context, r *Reader, since []byte) (*Report, error) {
	cp, err := r.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	rep := &Report{Checkpoint: cp, Heads: map[string]uint64{}}
	if since != nil {
		old, err := OpenCheckpoint(since, r.verifier)
		if err != nil {
			return nil, fmt.Errorf("the earlier checkpoint: %w", err)
		}
		if err := r.consistent(ctx, old, cp); err != nil {
			return nil, err
		}
		rep.Since = old.Size
	}
	var mu sync.Mutex
	var index uint64
	var bad error
	hasher := func(bundle []byte) ([][]byte, error) {
		es, err := bundleEntries(bundle)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		hs := make([][]byte, len(es))
		for i, e := range es {
			h, err := attest.ReadHead(e)
			if err != nil && bad == nil {
				bad = fmt.Errorf("%w: entry %d is not a signed head: %v", ErrNotVerified, index+uint64(i), err)
			}
			if err == nil {
				rep.Heads[h.KeyID]++
			}
			hs[i] = rfc6962.DefaultHasher.HashLeaf(e)
		}
		index += uint64(len(es))
		return hs, nil
	}
	f := fsck.New(r.verifier.Name(), r.verifier, r.f, hasher, fsck.Opts{N: 4})
	if err := f.Check(ctx); err != nil {
		return nil, fmt.Errorf("%w: log %q: %v", ErrNotVerified, r.loc, err)
	}
	if bad != nil {
		return nil, bad
	}
	return rep, nil
}

// InconsistentError says a log's checkpoint does not extend an earlier
// one: the evidence of a fork or a rewrite.
type InconsistentError struct {
	OldSize, NewSize uint64
	OldRoot, NewRoot []byte
}

func (e *InconsistentError) Error() string {
	return fmt.Sprintf("the log is not consistent with the earlier checkpoint: size %d root %x, then size %d root %x", e.OldSize, e.OldRoot, e.NewSize, e.NewRoot)
}

func (e *InconsistentError) Unwrap() error { return ErrNotVerified }

// consistent checks that checkpoint cur extends checkpoint old.
func (r *Reader) consistent(ctx context.Context, old, cur *Checkpoint) error {
	inc := &InconsistentError{OldSize: old.Size, NewSize: cur.Size, OldRoot: old.Hash, NewRoot: cur.Hash}
	switch {
	case cur.Size < old.Size:
		return inc
	case cur.Size == old.Size:
		if string(cur.Hash) != string(old.Hash) {
			return inc
		}
		return nil
	case old.Size == 0:
		return nil
	}
	p, err := r.Consistency(ctx, old.Size, cur.Size)
	if err != nil {
		return err
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old.Size, cur.Size, p, old.Hash, cur.Hash); err != nil {
		return inc
	}
	return nil
}
