// Package oracle drives differential tests of the overlay reader: it builds
// seeded random workspaces, generates seeded random sequences of filesystem
// operations (every kind an agent commonly does, with odd names and nested
// paths), replays recorded sequences, compares a change list with the naive
// full-tree diff of package treediff, and shrinks a failing sequence to a
// minimal one by delta debugging.
//
// Start with Build (a lower tree), Generate (operations done in a merged
// view, recorded as []Op), Compare, and Shrink. An Op is data: replaying it
// with Do on another tree of the same seed does the same thing, and an
// operation whose target is gone fails harmlessly, so any subsequence of a
// recorded sequence is itself a valid sequence.
package oracle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is one kind of operation.
type Kind string

// The operation kinds. Paths are relative to the tree root.
const (
	Create       Kind = "create"        // write a new file Path with Data (parents made)
	Mkdir        Kind = "mkdir"         // mkdir -p Path
	Modify       Kind = "modify"        // overwrite Path with Data
	TruncSame    Kind = "trunc-same"    // truncate Path and write its own bytes back
	Append       Kind = "append"        // append Data to Path
	Truncate     Kind = "truncate"      // truncate Path to N bytes
	OpenNoWrite  Kind = "open-no-write" // open Path for writing, write nothing
	Chmod        Kind = "chmod"         // chmod Path to mode N
	Chown        Kind = "chown"         // lchown Path to uid N, gid N+1
	Touch        Kind = "touch"         // set Path's mtime to N ns (no symlink follow)
	Setxattr     Kind = "setxattr"      // lsetxattr Path Arg=Data
	Removexattr  Kind = "removexattr"   // lremovexattr Path Arg
	Delete       Kind = "delete"        // unlink Path
	RmRf         Kind = "rm-rf"         // rm -rf Path
	RmRfRecreate Kind = "rm-rf-recreate"
	Rename       Kind = "rename"   // rename Path to Arg (a file, or a dir made only in the upper layer)
	Move         Kind = "move"     // mv Path Arg: rename, falling back to a child-by-child move on EXDEV
	Hardlink     Kind = "hardlink" // link Path as Arg
	Symlink      Kind = "symlink"  // symlink Arg (target Data)
	Mkfifo       Kind = "mkfifo"   // mkfifo Path
	Mknod        Kind = "mknod"    // char device Path with rdev N
	Socket       Kind = "socket"   // bind a unix socket at Path
	CreateDelete Kind = "create-delete"
	TypeChange   Kind = "typechange" // a file becomes a dir, anything else becomes a file
)

// Kinds lists every kind, in the order Generate weighs them.
var Kinds = []Kind{
	Create, Mkdir, Modify, TruncSame, Append, Truncate, OpenNoWrite, Chmod, Chown, Touch,
	Setxattr, Removexattr, Delete, RmRf, RmRfRecreate, Rename, Move, Hardlink, Symlink,
	Mkfifo, Mknod, Socket, CreateDelete, TypeChange,
}

// Op is one recorded operation.
type Op struct {
	Kind Kind
	Path string // raw bytes, relative to the root
	Arg  string // second path or xattr name
	Data string // contents, symlink target or xattr value
	N    int64  // mode, owner, size, time or rdev
}

// GoString renders op as a Go composite literal, for turning a shrunk
// sequence into a regular test.
func (op Op) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Kind: %q, Path: %q", string(op.Kind), op.Path)
	if op.Arg != "" {
		fmt.Fprintf(&b, ", Arg: %q", op.Arg)
	}
	if op.Data != "" {
		fmt.Fprintf(&b, ", Data: %q", op.Data)
	}
	if op.N != 0 {
		fmt.Fprintf(&b, ", N: %d", op.N)
	}
	return b.String() + "}"
}

// Literal renders ops as a Go slice literal.
func Literal(ops []Op) string {
	var b strings.Builder
	b.WriteString("[]oracle.Op{\n")
	for _, op := range ops {
		b.WriteString("\t" + strings.Replace(op.GoString(), "{Kind: ", "{Kind: oracle.Kind(", 1))
		b.WriteString(",\n")
	}
	b.WriteString("}")
	return strings.ReplaceAll(b.String(), `", Path:`, `"), Path:`)
}

// Do performs op in the tree at root, never following a symlink in its
// last component (nor, through the fd-relative socket bind, anywhere).
// An error means the operation did not apply (its target is gone, or the
// kernel refused); a sequence goes on regardless.
func (op Op) Do(root string) error {
	p := filepath.Join(root, op.Path)
	q := filepath.Join(root, op.Arg)
	switch op.Kind {
	case Create:
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return writeNew(p, op.Data)
	case Mkdir:
		return os.MkdirAll(p, 0o755)
	case Modify:
		return writeExisting(p, op.Data, unix.O_TRUNC)
	case TruncSame:
		b, err := readRegular(p)
		if err != nil {
			return err
		}
		return writeExisting(p, string(b), unix.O_TRUNC)
	case Append:
		return writeExisting(p, op.Data, unix.O_APPEND)
	case Truncate:
		return writeExisting(p, "", 0, op.N)
	case OpenNoWrite:
		return writeExisting(p, "", 0)
	case Chmod:
		return chmodNoFollow(p, uint32(op.N))
	case Chown:
		return unix.Lchown(p, int(op.N), int(op.N)+1)
	case Touch:
		ts := unix.NsecToTimespec(op.N)
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	case Setxattr:
		return unix.Lsetxattr(p, op.Arg, []byte(op.Data), 0)
	case Removexattr:
		return unix.Lremovexattr(p, op.Arg)
	case Delete:
		return unix.Unlink(p)
	case RmRf:
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		return os.RemoveAll(p)
	case RmRfRecreate:
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		return writeNew(filepath.Join(p, "again"), op.Data)
	case Rename:
		return unix.Rename(p, q)
	case Move:
		return move(p, q)
	case Hardlink:
		return unix.Linkat(unix.AT_FDCWD, p, unix.AT_FDCWD, q, 0)
	case Symlink:
		return unix.Symlink(op.Data, q)
	case Mkfifo:
		return unix.Mkfifo(p, 0o640)
	case Mknod:
		return unix.Mknod(p, unix.S_IFCHR|0o600, int(op.N))
	case Socket:
		return bindSocket(p)
	case CreateDelete:
		if err := writeNew(p, op.Data); err != nil {
			return err
		}
		return unix.Unlink(p)
	case TypeChange:
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			if err := unix.Unlink(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		return writeNew(p, op.Data)
	}
	return fmt.Errorf("unknown operation kind %q", op.Kind)
}

func writeNew(p, data string) error {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(data))
	return errors.Join(err, unix.Close(fd))
}

// writeExisting opens an existing regular file for writing (never a FIFO or
// device: O_NONBLOCK, then a type check), optionally truncates it to size,
// and writes data.
func writeExisting(p, data string, flags int, size ...int64) error {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|flags&^unix.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%q is not a regular file", p)
	}
	if flags&unix.O_TRUNC != 0 {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return err
		}
	}
	if len(size) == 1 {
		if err := unix.Ftruncate(fd, size[0]); err != nil {
			return err
		}
	}
	if data != "" {
		_, err = unix.Write(fd, []byte(data))
	}
	return err
}

func readRegular(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%q is not a regular file", p)
	}
	b := make([]byte, fi.Size())
	_, err = f.ReadAt(b, 0)
	if fi.Size() == 0 {
		err = nil
	}
	return b, err
}

// chmodNoFollow changes p's mode unless p is a symlink.
func chmodNoFollow(p string, mode uint32) error {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("%q is a symlink", p)
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode)
}

// move renames p to q; when the kernel refuses with EXDEV (a directory of
// the lower layer under redirect_dir=nofollow) it does what mv's fallback
// does: makes q and moves the children one by one, then removes p.
func move(p, q string) error {
	err := unix.Rename(p, q)
	if !errors.Is(err, unix.EXDEV) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	if err := unix.Mkdir(q, st.Mode&0o7777); err != nil {
		return err
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := move(filepath.Join(p, e.Name()), filepath.Join(q, e.Name())); err != nil {
			return err
		}
	}
	return unix.Rmdir(p)
}

// bindSocket binds a unix socket at p through its parent's descriptor, so
// the length of the whole path does not matter.
func bindSocket(p string) error {
	dir, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := "/proc/self/fd/" + strconv.Itoa(dir) + "/" + filepath.Base(p)
	if len(name) >= 108 {
		return fmt.Errorf("socket name %q too long", filepath.Base(p))
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	return unix.Bind(s, &unix.SockaddrUnix{Name: name})
}

// Replay performs ops in order in the tree at root and returns how many
// applied.
func Replay(root string, ops []Op) int {
	n := 0
	for _, op := range ops {
		if op.Do(root) == nil {
			n++
		}
	}
	return n
}
