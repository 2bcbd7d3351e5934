package overlay

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// node is one open file of a layer, as the classifier sees it. Children
// are addressed by one name component; "" in lstat means the node itself.
// The real implementation is fsNode; tests use in-memory fixtures.
type node interface {
	// lstat describes child name (or the node itself for "") without
	// following a symlink.
	lstat(name string) (linux.Stat, error)
	// names lists a directory's entries, unsorted, at most limit+1 of
	// them when limit > 0.
	names(limit int) ([]string, error)
	// open opens child name, failing with errSwapped unless it is still
	// the file want describes: same device, inode and type and, for a
	// non-directory, same size, mtime and ctime.
	open(name string, want linux.Stat) (node, error)
	// xattrs returns all extended attributes, raw.
	xattrs() ([]attest.Xattr, error)
	// readlink returns a symlink's target.
	readlink() (string, error)
	// digest returns the SHA-256 of a regular file's contents, failing
	// with errSwapped if the file changed while being read and with
	// errTimeUp once deadline (if set) has passed. With flush, the file's
	// dirty pages are written back first: that write-protects every
	// shared mapping of them, so a write through a mapping made after it
	// faults and stamps the file's ctime, and the stat after the read
	// sees it.
	digest(deadline time.Time, flush bool) ([]byte, error)
	close()
}

var (
	// errSwapped: the file at a name is not the one listed or stat'ed, or
	// it changed while being read.
	errSwapped = errors.New("file changed or was replaced while being read")
	// errTimeUp: the read deadline passed.
	errTimeUp = errors.New("read deadline passed")
)

// sameFile reports whether a and b are the same inode with the same type.
func sameFile(a, b linux.Stat) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode&unix.S_IFMT == b.Mode&unix.S_IFMT
}

// fsNode is a node of a real filesystem: a directory open O_RDONLY, or any
// other file open O_PATH (never for reading until digest reopens a regular
// file through the checked descriptor).
type fsNode struct {
	fd  int
	st  linux.Stat // what fd was checked to be
	buf *[]byte    // the layer's shared read buffer
}

// digestBufSize bounds the memory used for hashing.
const digestBufSize = 128 << 10

// openFSRoot opens the layer root at path (its last component not
// followed) as a directory.
func openFSRoot(path string) (*fsNode, error) {
	return fsRootOf(linux.Openat(unix.AT_FDCWD, path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW))
}

// openLayers opens the upper layer at upper and the lower one: lowerDir
// when the caller pinned it, else the path lower. Both or neither.
func openLayers(upper, lower string, lowerDir *os.File) (u, l *fsNode, err error) {
	if u, err = openFSRoot(upper); err != nil {
		return nil, nil, err
	}
	if lowerDir != nil {
		l, err = openPinnedRoot(lowerDir)
	} else {
		l, err = openFSRoot(lower)
	}
	if err != nil {
		u.close()
		return nil, nil, err
	}
	return u, l, nil
}

// openPinnedRoot opens again, for reading, the directory a caller holds
// open as dir (a descriptor opened and identified earlier): that inode and
// no other, whatever its path now leads to.
func openPinnedRoot(dir *os.File) (*fsNode, error) {
	return fsRootOf(linux.OpenBeneath(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY))
}

// fsRootOf makes the node of a root directory opened as fd.
func fsRootOf(fd int, err error) (*fsNode, error) {
	if err != nil {
		return nil, err
	}
	st, err := linux.Lstat(fd, "")
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	buf := make([]byte, digestBufSize)
	return &fsNode{fd: fd, st: st, buf: &buf}, nil
}

func (n *fsNode) lstat(name string) (linux.Stat, error) { return linux.Lstat(n.fd, name) }

func (n *fsNode) names(limit int) ([]string, error) { return linux.ReadDirNamesMax(n.fd, limit) }

func (n *fsNode) open(name string, want linux.Stat) (node, error) {
	flags := unix.O_PATH
	if want.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.O_RDONLY | unix.O_DIRECTORY
	}
	fd, err := linux.OpenBeneath(n.fd, name, flags)
	if err != nil {
		return nil, err
	}
	st, err := linux.Lstat(fd, "")
	if err == nil && (!sameFile(st, want) || flags == unix.O_PATH && !sameContentStat(st, want)) {
		err = fmt.Errorf("open %q: %w", name, errSwapped)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &fsNode{fd: fd, st: st, buf: n.buf}, nil
}

func (n *fsNode) xattrs() ([]attest.Xattr, error) {
	names, err := linux.Listxattr(n.fd)
	if err != nil {
		return nil, err
	}
	xs := make([]attest.Xattr, 0, len(names))
	for _, name := range names {
		v, err := linux.Getxattr(n.fd, name)
		if errors.Is(err, unix.ENODATA) {
			return nil, fmt.Errorf("getxattr %q: %w", name, errSwapped)
		}
		if err != nil {
			return nil, err
		}
		xs = append(xs, attest.Xattr{Name: name, Value: v})
	}
	slices.SortFunc(xs, func(a, b attest.Xattr) int { return strings.Compare(a.Name, b.Name) })
	return xs, nil
}

func (n *fsNode) readlink() (string, error) { return linux.Readlinkat(n.fd, "") }

// digest reopens the checked O_PATH descriptor for reading (so the inode
// read is the one checked, whatever its name points to now), hashes it
// with the shared bounded buffer, and checks that size, mtime and ctime
// did not change during the read.
func (n *fsNode) digest(deadline time.Time, flush bool) ([]byte, error) {
	fd, err := n.openForDigest(flush)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return digestFD(fd, n.st, *n.buf, deadline)
}

// openForDigest reopens the checked O_PATH descriptor of a regular file
// for reading and checks that it is still the file n.st describes. The
// descriptor it returns pins that inode: the caller may close n.
func (n *fsNode) openForDigest(flush bool) (int, error) {
	if n.st.Mode&unix.S_IFMT != unix.S_IFREG {
		return -1, fmt.Errorf("digest of a non-regular file: %w", errSwapped)
	}
	fd, err := linux.Reopen(n.fd, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, err
	}
	if flush {
		// Page writeback alone, without fdatasync's journal commit and
		// device flush: only the write-protection matters here.
		if err := unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("write back: %w", err)
		}
	}
	before, err := linux.Lstat(fd, "")
	if err == nil && (!sameFile(before, n.st) || !sameContentStat(before, n.st)) {
		err = errSwapped
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// digestFD returns the SHA-256 of the regular file open for reading at
// fd, which was checked to be the file want describes, reading it through
// buf; errSwapped if it changed while being read, errTimeUp once deadline
// (if set) has passed.
func digestFD(fd int, want linux.Stat, buf []byte, deadline time.Time) ([]byte, error) {
	h := sha256.New()
	var total uint64
	for {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, errTimeUp
		}
		var k int
		var err error
		for {
			k, err = unix.Read(fd, buf)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if k == 0 {
			break
		}
		h.Write(buf[:k])
		total += uint64(k)
		if total > want.Size {
			return nil, errSwapped
		}
	}
	after, err := linux.Lstat(fd, "")
	if err != nil {
		return nil, err
	}
	if total != want.Size || !sameContentStat(after, want) {
		return nil, errSwapped
	}
	return h.Sum(nil), nil
}

// sameContentStat reports whether size, mtime and ctime agree: the file
// was not written between the two stats.
func sameContentStat(a, b linux.Stat) bool {
	return a.Size == b.Size && a.MtimeNS == b.MtimeNS && a.CtimeNS == b.CtimeNS
}

func (n *fsNode) close() { unix.Close(n.fd) }
