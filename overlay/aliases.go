package overlay

import (
	"errors"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// Aliases returns, for each upper regular file p in ps, every name its
// inode has once the change set is applied: its other names in the upper
// layer and, where lowerToo(p) (an unchanged copy-up, which apply links
// to in the workspace, where overlayfs split it from its lower links)
// and the lower file at p has several links, every name of that lower
// inode in the lower layer (lowerDir, or the path lower). The answer
// lists p itself too. It
// walks a layer only when a link count says names are missing, each layer
// at most once, by descriptors only, never following a symlink or
// leaving the layer's mount.
func Aliases(upper, lower string, lowerDir *os.File, ps []attest.Path, lowerToo func(attest.Path) bool) (map[attest.Path][]attest.Path, error) {
	u, l, err := openLayers(upper, lower, lowerDir)
	if err != nil {
		return nil, err
	}
	defer u.close()
	defer l.close()
	type want struct {
		upper, lower [2]uint64
		hasLower     bool
	}
	wants := map[attest.Path]want{}
	needUpper, needLower := map[[2]uint64]bool{}, map[[2]uint64]bool{}
	for _, p := range ps {
		st, err := statBeneath(u.fd, p)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		w := want{upper: [2]uint64{st.Dev, st.Ino}}
		if st.Nlink > 1 {
			needUpper[w.upper] = true
		}
		if !lowerToo(p) {
			wants[p] = w
			continue
		}
		if lst, err := statBeneath(l.fd, p); err == nil && lst.Mode&unix.S_IFMT == unix.S_IFREG && lst.Nlink > 1 {
			w.lower, w.hasLower = [2]uint64{lst.Dev, lst.Ino}, true
			needLower[w.lower] = true
		}
		wants[p] = w
	}
	upperNames, err := namesOf(u.fd, needUpper)
	if err != nil {
		return nil, err
	}
	lowerNames, err := namesOf(l.fd, needLower)
	if err != nil {
		return nil, err
	}
	out := map[attest.Path][]attest.Path{}
	for p, w := range wants {
		names := []attest.Path{p}
		names = append(names, upperNames[w.upper]...)
		if w.hasLower {
			names = append(names, lowerNames[w.lower]...)
		}
		slices.Sort(names)
		out[p] = slices.Compact(names)
	}
	return out, nil
}

func statBeneath(root int, p attest.Path) (linux.Stat, error) {
	fd, err := linux.OpenBeneath(root, string(p), unix.O_PATH)
	if err != nil {
		return linux.Stat{}, err
	}
	defer unix.Close(fd)
	return linux.Lstat(fd, "")
}

// namesOf walks the tree at root and returns the names of the regular
// files whose (device, inode) is in want. An entry that vanishes while
// walked is skipped; any other error fails the walk.
func namesOf(root int, want map[[2]uint64]bool) (map[[2]uint64][]attest.Path, error) {
	out := map[[2]uint64][]attest.Path{}
	if len(want) == 0 {
		return out, nil
	}
	home, err := linux.Lstat(root, "")
	if err != nil {
		return nil, err
	}
	var walk func(fd int, p attest.Path) error
	walk = func(dirfd int, p attest.Path) error {
		fd, err := linux.OpenBeneath(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		names, err := linux.ReadDirNames(fd)
		if err != nil {
			return err
		}
		for _, name := range names {
			child := join(p, name)
			st, err := linux.Lstat(fd, name)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return err
			}
			if !linux.SameMount(st, home) {
				continue
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				if k := [2]uint64{st.Dev, st.Ino}; want[k] {
					out[k] = append(out[k], child)
				}
			case unix.S_IFDIR:
				sub, err := linux.OpenBeneath(fd, name, unix.O_PATH|unix.O_DIRECTORY)
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				if err != nil {
					return err
				}
				err = walk(sub, child)
				unix.Close(sub)
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(root, attest.Root)
}
