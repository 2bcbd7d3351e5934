package overlay

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// ErrForeignUpper is wrapped by Read's error when the upper (or work)
// layer holds something the pinned mount options cannot produce: a
// redirect or metacopy xattr, an opaque xattr other than "y" (or any on
// the root), a zero-size regular file marked as a whiteout by xattr, or a
// non-empty work/index. Such a layer was not made by this session and
// is not classified at all.
var ErrForeignUpper = errors.New("upper layer was not made by an overlay with the pinned options")

// Defaults for the zero fields of ReadOptions.
const (
	DefaultXattrNS       = "trusted"
	DefaultDigestCap     = 1 << 30 // bytes
	DefaultMaxEntries    = 10_000_000
	DefaultMaxDirEntries = 1_000_000
	// DefaultMaxPathLen bounds one path (bytes): eight times PATH_MAX.
	DefaultMaxPathLen = 32 << 10
	// DefaultMaxPathBytes bounds the bytes of all listed paths together,
	// which bounds the statement and the memory of a read whatever the
	// depth and the length of the names.
	DefaultMaxPathBytes = 64 << 20
)

// ReadOptions tunes Read. The zero value reads a privileged overlay with
// the defaults above and no deadline.
type ReadOptions struct {
	// XattrNS is the namespace of overlay's private xattrs: "trusted"
	// (default) or "user" (an overlay mounted with userxattr).
	XattrNS string
	// DigestCap is the size above which a regular file is not hashed but
	// compared by size and mtime (with a DigestCap reason).
	DigestCap int64
	// MaxEntries bounds the upper plus lower entries examined; past it the
	// read stops with an EntryBudget reason.
	MaxEntries int64
	// MaxDirEntries bounds one directory's entries; a directory over it is
	// classified itself but its contents are skipped (DirEntryLimit).
	MaxDirEntries int64
	// MaxPathLen bounds one path: an entry whose path is longer is not
	// examined, with its subtree (PathLimit).
	MaxPathLen int64
	// MaxPathBytes bounds the bytes of the listed paths together: past
	// it the read stops (PathLimit).
	MaxPathBytes int64
	// Deadline, if set, stops the read with a TimeBudget reason.
	Deadline time.Time
	// NoMountID tells mounts apart by st_dev only (the kernel cannot
	// report mount IDs, or that is being simulated); Read then adds a
	// NoMountID reason. Read does the same when the kernel gives none.
	NoMountID bool
	// WorkDir, if set, is the overlay's work directory: Read fails with
	// ErrForeignUpper when its index directory is not empty.
	WorkDir string
	// Exclude, if set, is asked for each non-root upper path before it is
	// classified; for a true answer the path and its upper subtree are
	// summarized in Changes.Excluded instead (see summarize).
	Exclude func(p attest.Path) bool
	// Settle, when positive, says the agent may still be writing (a
	// checkpoint): an upper file whose ctime lies within Settle of now
	// is hashed only once Settle has passed since, so a write in
	// the same clock tick cannot hide in the digest, and a file that
	// changes while hashed is reported Unstable instead of Vanished.
	// Each upper file is also written back before it is hashed, so that
	// a write through a shared mapping is caught as well (see
	// probe.ScanOptions.Flush).
	Settle time.Duration
	// KnownDigest, if set, is asked for the digest of each upper regular
	// file about to be hashed, with its path and stat; a non-nil answer
	// is taken instead of reading the file. The caller answers only for
	// a stat tuple it hashed itself and saw settled (not racy).
	KnownDigest func(p attest.Path, st FileStat) []byte
	// Progress, if set, is called with each upper or lower entry as it is
	// counted against the entry budget (for a progress display; it must
	// be quick).
	Progress func(p attest.Path)

	// LowerDir, if set, is the lower layer's root as the caller opened
	// and identified it: Read reads beneath it, and the lower path only
	// names it in reasons, so a path swapped since cannot lead elsewhere.
	LowerDir *os.File

	reuse *reuse // set by ReadChanged
}

// withDefaults fills zero fields and validates the rest.
func (o ReadOptions) withDefaults() (ReadOptions, error) {
	if o.XattrNS == "" {
		o.XattrNS = DefaultXattrNS
	}
	if o.XattrNS != "trusted" && o.XattrNS != "user" {
		return o, fmt.Errorf("overlay xattr namespace %q: want \"trusted\" or \"user\"", o.XattrNS)
	}
	for _, v := range []struct {
		name string
		p    *int64
		def  int64
	}{
		{"digest cap", &o.DigestCap, DefaultDigestCap},
		{"entry budget", &o.MaxEntries, DefaultMaxEntries},
		{"per-directory entry limit", &o.MaxDirEntries, DefaultMaxDirEntries},
		{"path length limit", &o.MaxPathLen, DefaultMaxPathLen},
		{"path bytes budget", &o.MaxPathBytes, DefaultMaxPathBytes},
	} {
		if *v.p < 0 {
			return o, fmt.Errorf("%s %d: must not be negative", v.name, *v.p)
		}
		if *v.p == 0 {
			*v.p = v.def
		}
	}
	return o, nil
}

// FileStat is what KnownDigest is told of an upper file: the stat tuple a
// digest of it is valid for.
type FileStat struct {
	Mode    uint32 // st_mode
	Ino     uint64
	Size    uint64
	MtimeNS int64
	CtimeNS int64
}

func fileStat(st linux.Stat) FileStat {
	return FileStat{Mode: st.Mode, Ino: st.Ino, Size: st.Size, MtimeNS: st.MtimeNS, CtimeNS: st.CtimeNS}
}

// Changes is the change list of one upper layer against its lower layer.
type Changes struct {
	// Entries are the changed paths, sorted by path bytes, each once.
	Entries []attest.Entry
	// Incomplete lists every place the read could not look; empty only
	// when every entry was examined.
	Incomplete []attest.Reason
	// Excluded are the summarized subtrees with upper entries, by path.
	Excluded []attest.Excluded
	Stats    Stats
	// outward are the excluded subtrees a symlink's resolution looked
	// outside of (see leaves): ReadChanged examines them again.
	outward []attest.Path
}

// Stats counts the work a read did.
type Stats struct {
	UpperEntries int64  // upper entries examined (root included)
	LowerEntries int64  // lower entries examined (root included)
	BytesHashed  uint64 // bytes of regular files hashed, both layers
}

// Read classifies the quiescent upper layer at upper against the lower
// layer at lower, following the rules of the package doc, and returns the
// change list. It walks with descriptors only: each root is opened once,
// every entry relative to its parent, no symlink is followed, and no file
// other than a regular one checked by fstat is opened for reading. Memory
// is bounded by one directory listing per level, the changes, and the
// hard-linked upper files.
//
// Read returns an error wrapping ErrForeignUpper for a layer the pinned
// options cannot produce, or for invalid options; everything else it
// could not examine (a missing root, unreadable or vanished entries, other
// mounts, caps and budgets) is listed in Changes.Incomplete.
func Read(upper, lower string, opt ReadOptions) (*Changes, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if opt.WorkDir != "" {
		if err := checkWorkIndex(opt.WorkDir); err != nil {
			return nil, err
		}
	}
	var missing []attest.Reason
	openRoot := func(layer, path string, pinned *os.File) node {
		var n *fsNode
		var err error
		if pinned != nil {
			n, err = openPinnedRoot(pinned)
		} else {
			n, err = openFSRoot(path)
		}
		if err != nil {
			code := attest.Unreadable
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				code = attest.RootMissing
			}
			missing = append(missing, attest.Reason{Code: code, Path: attest.Root,
				Detail: fmt.Sprintf("%s root %q: %v", layer, path, err)})
			return nil
		}
		return n
	}
	u := openRoot("upper", upper, nil)
	l := openRoot("lower", lower, opt.LowerDir)
	if u != nil {
		defer u.close()
	}
	if l != nil {
		defer l.close()
	}
	ch, err := readLayers(u, l, opt)
	if err != nil {
		return nil, err
	}
	ch.Incomplete = append(missing, ch.Incomplete...)
	return ch, nil
}

// checkWorkIndex fails with ErrForeignUpper when work/index holds anything
// (index=off never creates entries there).
func checkWorkIndex(work string) error {
	fd, err := linux.Openat(unix.AT_FDCWD, work, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("open work dir: %w", err)
	}
	defer unix.Close(fd)
	idx, err := linux.OpenBeneath(fd, "index", unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open index dir in work dir %q: %w", work, err)
	}
	defer unix.Close(idx)
	names, err := linux.ReadDirNamesMax(idx, 1)
	if err != nil {
		return fmt.Errorf("list index dir in work dir %q: %w", work, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: index dir in work dir %q is not empty (holds %q)", ErrForeignUpper, work, names[0])
	}
	return nil
}
