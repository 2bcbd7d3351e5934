package layerseal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/review"
)

// ReviewReadLimit is the most bytes a review reads of one side of a
// change; a larger file is shown by size and digest, as a binary file.
const ReviewReadLimit = 64 << 20

// Review is a staged session opened for reading its change set: its
// verified statement, the workspace (identified as at launch) and the
// upper layer, each opened once. Close releases them.
type Review struct {
	st      *attest.Statement
	entries []attest.Entry
	ws      *os.File
	upper   int
}

// OpenReview opens the staged session whose output dir (or id) is out
// for review. It fails as Staged does for a session applied or
// discarded, and with ErrWorkspaceMoved when the workspace path no
// longer leads to the directory the session ran on.
func (store *Store) OpenReview(out string) (*Review, error) {
	s, err := store.openStaged(out)
	if err != nil {
		return nil, err
	}
	ws, err := openWorkspace(s.rec.Workspace, s.launch.Lower)
	if err != nil {
		return nil, err
	}
	upper, err := linux.Openat(unix.AT_FDCWD, s.dir.upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		ws.Close()
		return nil, fmt.Errorf("session %s: its upper layer: %w", s.rec.ID, unwrapPath(err))
	}
	st := s.view()
	return &Review{st: st, entries: st.AppliedEntries(), ws: ws, upper: upper}, nil
}

// Close releases the workspace and the upper layer.
func (r *Review) Close() error {
	return errors.Join(r.ws.Close(), linux.Close(r.upper))
}

// Statement is the session's verified statement.
func (r *Review) Statement() *attest.Statement { return r.st }

// Entries are the changes to apply at or beneath paths (all when paths
// is empty), in path order. A path that is neither a change nor a
// directory above one is an error naming it.
func (r *Review) Entries(paths []attest.Path) ([]attest.Entry, error) {
	if len(paths) == 0 {
		return r.entries, nil
	}
	if err := inChangeSet(r.entries, paths); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(r.entries), func(e attest.Entry) bool { return !underAny(e.Path, paths) }), nil
}

// Conflicts lists the entries whose workspace path holds neither the
// state the statement found at launch nor the one to apply: someone
// changed them meanwhile, and a patch shows them against what is there
// now.
func (r *Review) Conflicts(entries []attest.Entry) []attest.Path {
	return workspaceChanged(r.ws, entries, false)
}

// Pair reads the two sides of e as a patch shows them: the workspace as
// it is now and the change set's state. The change set's file bytes are
// read from the upper layer beneath its descriptor (no symlink followed)
// and checked against the statement's digest (overlay.ErrNotAttested
// when they differ); a file without a digest (over the digest cap) or
// over ReviewReadLimit is not read. Its Meta is the statement's metadata
// change of e (review.PatchMetadata).
func (r *Review) Pair(e attest.Entry) (review.FilePair, error) {
	p := review.FilePair{Path: e.Path, Meta: review.PatchMetadata(e)}
	if err := r.workspaceSide(e.Path, &p.Old); err != nil {
		return p, err
	}
	if e.New == nil {
		return p, nil
	}
	n := &p.New
	n.Mode = review.GitMode(e.New.Type, e.New.Mode)
	switch e.New.Type {
	case attest.Symlink:
		n.Data = []byte(e.New.Target)
		n.Size = uint64(len(n.Data))
	case attest.File:
		n.Size, n.SHA256 = e.New.Size, e.New.SHA256
		if n.SHA256 == nil || n.Size > ReviewReadLimit {
			n.Unread = true
			return p, nil
		}
		b, err := readBeneath(r.upper, e.Path, n.Size)
		if err == nil && !bytes.Equal(sha(b), n.SHA256) {
			err = fmt.Errorf("%q: %w", string(e.Path), overlay.ErrNotAttested)
		}
		if err != nil {
			return p, fmt.Errorf("the change set's %w", err)
		}
		n.Data = b
	}
	return p, nil
}

// workspaceSide fills s with what the workspace holds at path now.
func (r *Review) workspaceSide(path attest.Path, s *review.Side) error {
	now, ok := workspaceState(int(r.ws.Fd()), path)
	if !ok {
		return nil
	}
	s.Mode = review.GitMode(now.Type, now.Mode)
	switch now.Type {
	case attest.Symlink:
		s.Data = []byte(now.Target)
		s.Size = uint64(len(s.Data))
	case attest.File:
		s.Size = now.Size
		if s.Size > ReviewReadLimit {
			s.Unread = true
			return nil
		}
		b, err := readBeneath(int(r.ws.Fd()), path, s.Size)
		if err != nil {
			return fmt.Errorf("the workspace's %w", err)
		}
		s.Data, s.Size = b, uint64(len(b))
	}
	return nil
}

// OldDigest is the SHA-256 of the workspace file a deletion removes:
// the statement's when it holds one, else read from the workspace when
// it still holds a regular file of the size the statement found; nil
// otherwise.
func (r *Review) OldDigest(e attest.Entry) []byte {
	if e.Old == nil || e.Old.Type != attest.File {
		return nil
	}
	if e.Old.SHA256 != nil {
		return e.Old.SHA256
	}
	if e.Old.Size > ReviewReadLimit {
		return nil
	}
	b, err := readBeneath(int(r.ws.Fd()), e.Path, e.Old.Size)
	if err != nil || uint64(len(b)) != e.Old.Size {
		return nil
	}
	return sha(b)
}

// readBeneath reads the regular file at p beneath dir, no symlink
// followed, expecting about size bytes and reading at most
// ReviewReadLimit.
func readBeneath(dir int, p attest.Path, size uint64) ([]byte, error) {
	fd, err := linux.OpenBeneath(dir, string(p), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), unwrapPath(err))
	}
	f := os.NewFile(uintptr(fd), string(p))
	defer f.Close()
	st, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), unwrapPath(err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q is no longer a regular file", string(p))
	}
	b := make([]byte, 0, min(size, ReviewReadLimit)+1)
	b, err = readAll(f, b)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", string(p), unwrapPath(err))
	}
	if len(b) > ReviewReadLimit {
		return nil, fmt.Errorf("%q grew past %d bytes while being read", string(p), ReviewReadLimit)
	}
	return b, nil
}

// readAll reads f into b, at most ReviewReadLimit+1 bytes.
func readAll(f *os.File, b []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	_, err := buf.ReadFrom(io.LimitReader(f, ReviewReadLimit+1))
	return buf.Bytes(), err
}

// PairFrom is Pair for a rename (review.Renames): the old side is what
// the workspace holds at from now.
func (r *Review) PairFrom(from attest.Path, e attest.Entry) (review.FilePair, error) {
	p, err := r.Pair(e)
	if err != nil {
		return p, err
	}
	p.From, p.Old = from, review.Side{}
	return p, r.workspaceSide(from, &p.Old)
}
