// Package treediff is the tests' independent oracle: it records a naive
// manifest of a whole directory tree with plain path-based calls (lstat,
// readlink, read) and diffs two manifests path by path. It deliberately
// shares no code with the overlay reader it checks.
package treediff

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Node is what the manifest records of one path.
type Node struct {
	Type    string
	Mode    uint32
	UID     uint32
	GID     uint32
	Size    int64
	MtimeNS int64
	SHA256  string
	Target  string
	Rdev    uint64
	Xattrs  map[string][]byte
	// Links is the sorted list of other paths in the tree sharing this
	// regular file's inode.
	Links []string
}

// Manifest maps paths relative to the root ("." for the root) to nodes.
type Manifest map[string]Node

// Walk records the manifest of the tree at root, never following symlinks.
// Overlay-private xattrs (trusted.overlay.*, user.overlay.*) are ignored.
func Walk(root string) (Manifest, error) {
	m := Manifest{}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("lstat %q: %w", p, err)
		}
		n := Node{
			Mode:    st.Mode & 07777,
			UID:     st.Uid,
			GID:     st.Gid,
			MtimeNS: st.Mtim.Sec*1e9 + st.Mtim.Nsec,
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			n.Type, n.Size = "file", st.Size
			sum, err := hashFile(p)
			if err != nil {
				return err
			}
			n.SHA256 = sum
			inodes[st.Ino] = append(inodes[st.Ino], rel)
		case syscall.S_IFDIR:
			n.Type = "dir"
		case syscall.S_IFLNK:
			n.Type, n.Size = "symlink", st.Size
			if n.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFIFO:
			n.Type = "fifo"
		case syscall.S_IFSOCK:
			n.Type = "socket"
		case syscall.S_IFCHR:
			n.Type, n.Rdev = "char", st.Rdev
		case syscall.S_IFBLK:
			n.Type, n.Rdev = "block", st.Rdev
		}
		if n.Xattrs, err = xattrs(p); err != nil {
			return err
		}
		m[rel] = n
		return nil
	})
	for _, paths := range inodes {
		if len(paths) < 2 {
			continue
		}
		sort.Strings(paths)
		for _, p := range paths {
			n := m[p]
			for _, q := range paths {
				if q != p {
					n.Links = append(n.Links, q)
				}
			}
			m[p] = n
		}
	}
	return m, err
}

func hashFile(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %q: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func xattrs(p string) (map[string][]byte, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		if err == unix.ENOTSUP {
			return nil, nil
		}
		return nil, fmt.Errorf("llistxattr %q: %w", p, err)
	}
	var out map[string][]byte
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" || strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		val := make([]byte, 64<<10)
		vn, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			return nil, fmt.Errorf("lgetxattr %q %q: %w", p, name, err)
		}
		if out == nil {
			out = map[string][]byte{}
		}
		out[name] = val[:vn]
	}
	return out, nil
}

// Change is the naive classification of one path between two manifests.
type Change struct {
	Path   string
	Change string // added, deleted, typechange, modified, metadata
}

// Diff compares before and after path by path and returns the changed
// paths sorted by path bytes. Links are not compared (a hard link shows as
// the added path it is).
func Diff(before, after Manifest) []Change {
	paths := map[string]bool{}
	for p := range before {
		paths[p] = true
	}
	for p := range after {
		paths[p] = true
	}
	var out []Change
	for p := range paths {
		b, inB := before[p]
		a, inA := after[p]
		var c string
		switch {
		case !inA:
			c = "deleted"
		case !inB:
			c = "added"
		case a.Type != b.Type:
			c = "typechange"
		case a.SHA256 != b.SHA256 || a.Target != b.Target || a.Rdev != b.Rdev || a.Size != b.Size:
			c = "modified"
		case a.Mode != b.Mode || a.UID != b.UID || a.GID != b.GID || a.MtimeNS != b.MtimeNS || !sameXattrs(a.Xattrs, b.Xattrs):
			c = "metadata"
		default:
			continue
		}
		out = append(out, Change{Path: p, Change: c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func sameXattrs(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// Equal reports the first difference between two manifests, or "" when
// they are identical (links included).
func Equal(want, got Manifest) string {
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			return fmt.Sprintf("%q missing", p)
		}
		if !reflect.DeepEqual(w, g) {
			return fmt.Sprintf("%q differs:\nwant %+v\ngot  %+v", p, w, g)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			return fmt.Sprintf("%q unexpected", p)
		}
	}
	return ""
}

// WriteFile stores m at path (gob, which keeps any path bytes exactly).
func (m Manifest) WriteFile(path string) error {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(m); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o600)
}

// ReadFile loads a manifest stored by WriteFile.
func ReadFile(path string) (Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	return m, gob.NewDecoder(bytes.NewReader(b)).Decode(&m)
}
