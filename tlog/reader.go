package tlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/tessera/client"
	"golang.org/x/mod/sumdb/note"
)

// MaxCheckpointSize bounds a checkpoint note, cosignatures included.
const MaxCheckpointSize = 64 << 10

// Checkpoint is a log checkpoint whose log signature verified.
type Checkpoint struct {
	log.Checkpoint        // origin, size and root hash
	Note           []byte // the signed note as read, every signature line kept
}

// fetcher reads a log's static files.
type fetcher interface {
	ReadCheckpoint(ctx context.Context) ([]byte, error)
	ReadTile(ctx context.Context, l, i uint64, p uint8) ([]byte, error)
	ReadEntryBundle(ctx context.Context, i uint64, p uint8) ([]byte, error)
}

// Reader reads a log from its static files: a directory or an http(s)://
// URL. Every checkpoint it returns is verified with the log's key.
type Reader struct {
	loc      string
	f        fetcher
	get      func(ctx context.Context, name string) ([]byte, error)
	verifier note.Verifier
}

// OpenReader reads the log at loc, a directory or an http(s):// URL of
// its root, whose checkpoints verifier checks (its name is the origin).
func OpenReader(loc string, verifier note.Verifier) (*Reader, error) {
	r := &Reader{loc: loc, verifier: verifier}
	if isURL(loc) {
		u, err := url.Parse(loc)
		if err != nil {
			return nil, fmt.Errorf("log URL %q: %w", loc, err)
		}
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		f, err := client.NewHTTPFetcher(u, http.DefaultClient)
		if err != nil {
			return nil, fmt.Errorf("log URL %q: %w", loc, err)
		}
		r.f = f
		r.get = func(ctx context.Context, name string) ([]byte, error) { return httpGet(ctx, u.JoinPath(name)) }
		return r, nil
	}
	fi, err := os.Stat(loc)
	if err != nil {
		return nil, fmt.Errorf("log %q: %w", loc, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("log %q is not a directory (give the log's directory or its http(s):// URL)", loc)
	}
	r.f = client.FileFetcher{Root: loc}
	r.get = func(_ context.Context, name string) ([]byte, error) { return readBounded(filepath.Join(loc, name)) }
	return r, nil
}

func httpGet(ctx context.Context, u *url.URL) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("get %q: %w", u.String(), os.ErrNotExist)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %q: %s", u.String(), resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxCheckpointSize+1))
	if err == nil && len(b) > MaxCheckpointSize {
		err = fmt.Errorf("get %q: over %d bytes", u.String(), MaxCheckpointSize)
	}
	return b, err
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxCheckpointSize+1))
	if err == nil && len(b) > MaxCheckpointSize {
		err = fmt.Errorf("%q is over %d bytes", path, MaxCheckpointSize)
	}
	return b, err
}

// Location is the directory or URL the reader reads.
func (r *Reader) Location() string { return r.loc }

// Origin is the log's name, its key's name.
func (r *Reader) Origin() string { return r.verifier.Name() }

// Checkpoint reads the log's newest checkpoint and checks its signature.
func (r *Reader) Checkpoint(ctx context.Context) (*Checkpoint, error) {
	b, err := r.f.ReadCheckpoint(ctx)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("log %q has no checkpoint (not a log, or `layerseal log init` was not run)", r.loc)
	}
	if err != nil {
		return nil, fmt.Errorf("log %q: read the checkpoint: %w", r.loc, err)
	}
	return OpenCheckpoint(b, r.verifier)
}

// OpenCheckpoint checks a checkpoint note's log signature and parses it.
// Signatures by other keys (cosignatures) are kept in Note, unchecked.
func OpenCheckpoint(b []byte, verifier note.Verifier) (*Checkpoint, error) {
	if len(b) > MaxCheckpointSize {
		return nil, fmt.Errorf("%w: checkpoint over %d bytes", ErrNotVerified, MaxCheckpointSize)
	}
	cp, _, _, err := log.ParseCheckpoint(b, verifier.Name(), verifier)
	if err != nil {
		return nil, fmt.Errorf("%w: the checkpoint is not one signed by the log key given (%q), or is malformed", ErrNotVerified, verifier.Name())
	}
	return &Checkpoint{Checkpoint: *cp, Note: b}, nil
}

// Inclusion returns the inclusion proof of the entry at index in the tree
// of size size, read from the tiles.
func (r *Reader) Inclusion(ctx context.Context, index, size uint64) ([][]byte, error) {
	pb, err := client.NewProofBuilder(ctx, size, r.f.ReadTile)
	if err != nil {
		return nil, fmt.Errorf("log %q: read tiles: %w", r.loc, err)
	}
	p, err := pb.InclusionProof(ctx, index)
	if err != nil {
		return nil, fmt.Errorf("log %q: inclusion proof of entry %d in size %d: %w", r.loc, index, size, err)
	}
	return p, nil
}

// Consistency returns the consistency proof from size from to size to.
func (r *Reader) Consistency(ctx context.Context, from, to uint64) ([][]byte, error) {
	pb, err := client.NewProofBuilder(ctx, to, r.f.ReadTile)
	if err != nil {
		return nil, fmt.Errorf("log %q: read tiles: %w", r.loc, err)
	}
	p, err := pb.ConsistencyProof(ctx, from, to)
	if err != nil {
		return nil, fmt.Errorf("log %q: consistency proof from size %d to %d: %w", r.loc, from, to, err)
	}
	return p, nil
}

// Entries yields the entries [from, to) of a log of size size, in order.
func (r *Reader) Entries(ctx context.Context, from, to, size uint64) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		getSize := func(context.Context) (uint64, error) { return size, nil }
		left := to - from
		for b, err := range client.EntryBundles(ctx, 2, getSize, r.f.ReadEntryBundle, from, to-from) {
			if err != nil {
				yield(nil, fmt.Errorf("log %q: read entries: %w", r.loc, err))
				return
			}
			es, err := bundleEntries(b.Data)
			if err != nil {
				yield(nil, fmt.Errorf("log %q: entry bundle %d: %w", r.loc, b.RangeInfo.Index, err))
				return
			}
			// tessera v1.0.4's EntryBundles reads N as an end index, so
			// it may yield more than asked: count what is yielded.
			end := min(uint64(len(es)), uint64(b.RangeInfo.First)+uint64(b.RangeInfo.N))
			for _, e := range es[b.RangeInfo.First:end] {
				if left == 0 {
					return
				}
				left--
				if !yield(e, nil) {
					return
				}
			}
			if left == 0 {
				return
			}
		}
	}
}

func isURL(loc string) bool {
	return strings.HasPrefix(loc, "http://") || strings.HasPrefix(loc, "https://")
}
