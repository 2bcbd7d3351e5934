package oracle

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Rand returns the generator's source for seed.
func Rand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6c61796572736561)) }

// OldTime is the mtime every built entry starts near (nanoseconds), so a
// copy-up that keeps times is told apart from a change.
const OldTime = 1_600_000_000_000_000_000

// capV2 is a valid VFS_CAP_REVISION_2 security.capability value granting
// cap_net_bind_service in the permitted set.
var capV2 = string([]byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})

// xattrNames are the attributes operations set and remove: user and
// trusted names the overlay passes through, and a file capability.
var xattrNames = []string{"user.a", "user.b", "trusted.t", "security.capability"}

var modes = []int64{0o644, 0o600, 0o755, 0o444, 0o700, 0o4755, 0o1777, 0o000}
var owners = []int64{0, 1000, 1234, 65534}

// namer hands out fresh names, some of them odd.
type namer struct {
	rng *rand.Rand
	n   int
}

func (nm *namer) next() string {
	nm.n++
	switch nm.rng.IntN(12) {
	case 0:
		return fmt.Sprintf("new\nline%d", nm.n)
	case 1:
		return fmt.Sprintf("bad\xff\xfe%d", nm.n)
	case 2:
		return fmt.Sprintf("sp ace %d", nm.n)
	case 3:
		return fmt.Sprintf("%%41%%%d", nm.n)
	case 4:
		s := fmt.Sprintf("L%d", nm.n)
		return s + strings.Repeat("x", 255-len(s))
	case 5:
		return fmt.Sprintf("-ü\t%d", nm.n)
	}
	return fmt.Sprintf("n%d", nm.n)
}

func (nm *namer) data() string {
	sizes := []int{0, 1, 5, 17, 100, 4096}
	b := make([]byte, sizes[nm.rng.IntN(len(sizes))])
	for i := range b {
		b[i] = byte('a' + nm.rng.IntN(3))
	}
	return string(b)
}

// Build fills the empty directory root with a random tree drawn from rng:
// nested directories, regular files (some empty, some hard-linked), symlinks
// (relative, dangling, absolute), FIFOs, sockets, char devices, odd names,
// various modes and owners, user and trusted xattrs; every mtime near
// OldTime. It needs root (owners, devices, trusted xattrs).
func Build(root string, rng *rand.Rand) error {
	nm := &namer{rng: rng}
	var files []string
	var build func(dir string, depth int) error
	build = func(dir string, depth int) error {
		k := rng.IntN(6)
		if depth == 0 {
			k += 3
		}
		for range k {
			p := filepath.Join(dir, nm.next())
			var err error
			switch r := rng.IntN(20); {
			case r < 8:
				err = writeNew(p, nm.data())
				files = append(files, p)
			case r < 12 && depth < 3:
				if err = os.Mkdir(p, 0o755); err == nil {
					err = build(p, depth+1)
				}
			case r < 14:
				targets := []string{"n1", "../n2", "/nonexistent/layerseal", "dangling", filepath.Base(dir)}
				err = unix.Symlink(targets[rng.IntN(len(targets))], p)
			case r < 15:
				err = unix.Mkfifo(p, 0o644)
			case r < 16:
				err = unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
			case r < 17 && len(filepath.Base(p)) < 60:
				err = bindSocket(p)
			case r < 19 && len(files) > 0:
				err = os.Link(files[rng.IntN(len(files))], p)
			default:
				err = writeNew(p, nm.data())
				files = append(files, p)
			}
			if err != nil {
				return fmt.Errorf("build %q: %w", p, err)
			}
		}
		return nil
	}
	if err := build(root, 0); err != nil {
		return err
	}
	// Metadata, then times last (setting metadata changes no parent's mtime).
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := setMeta(rng, nm, root, p, d); err != nil {
			return fmt.Errorf("build %q: %w", p, err)
		}
		ts := unix.NsecToTimespec(OldTime + rng.Int64N(1000)*1_000_000_007)
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	})
}

func setMeta(rng *rand.Rand, nm *namer, root, p string, d fs.DirEntry) error {
	link := d.Type()&fs.ModeSymlink != 0
	if p != root {
		if rng.IntN(4) == 0 {
			if err := unix.Lchown(p, int(owners[rng.IntN(len(owners))]), int(owners[rng.IntN(len(owners))])); err != nil {
				return err
			}
		}
		if !link && rng.IntN(5) == 0 {
			m := modes[rng.IntN(len(modes))]
			if d.IsDir() {
				m |= 0o700 // the walk must go on
			}
			if err := unix.Chmod(p, uint32(m)); err != nil {
				return err
			}
		}
		if (d.IsDir() || d.Type().IsRegular()) && rng.IntN(5) == 0 {
			// Small values: ext4 keeps all of a file's xattrs in one block.
			v := []byte(nm.data())
			if len(v) > 100 {
				v = v[:100]
			}
			if err := unix.Lsetxattr(p, xattrNames[rng.IntN(2)], v, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// listing is the tree's current paths by type.
type listing struct {
	all, files, dirs, nonDirs, nonLinks []string // relative; dirs includes "."
}

func list(root string) (listing, error) {
	var l listing
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		l.all = append(l.all, rel)
		switch {
		case d.IsDir():
			l.dirs = append(l.dirs, rel)
			l.nonLinks = append(l.nonLinks, rel)
		case d.Type().IsRegular():
			l.files = append(l.files, rel)
			l.nonDirs = append(l.nonDirs, rel)
			l.nonLinks = append(l.nonLinks, rel)
		case d.Type()&fs.ModeSymlink != 0:
			l.nonDirs = append(l.nonDirs, rel)
		default:
			l.nonDirs = append(l.nonDirs, rel)
			l.nonLinks = append(l.nonLinks, rel)
		}
		return nil
	})
	return l, err
}

func pick(rng *rand.Rand, ps []string) (string, bool) {
	if len(ps) == 0 {
		return "", false
	}
	return ps[rng.IntN(len(ps))], true
}

func without(ps []string, drop string) []string {
	return slices.DeleteFunc(slices.Clone(ps), func(p string) bool { return p == drop })
}

// Generate draws n operations from rng, choosing targets among the paths
// the tree at root holds at each step, performs each in that tree, and
// returns them as recorded. Operations the kernel refuses are recorded too:
// replaying them fails the same way.
func Generate(root string, rng *rand.Rand, n int) ([]Op, error) {
	nm := &namer{rng: rng, n: 1000}
	var ops []Op
	for len(ops) < n {
		l, err := list(root)
		if err != nil {
			return ops, err
		}
		op, ok := draw(rng, nm, l)
		if !ok {
			continue
		}
		op.Do(root)
		ops = append(ops, op)
	}
	return ops, nil
}

func draw(rng *rand.Rand, nm *namer, l listing) (Op, bool) {
	op := Op{Kind: Kinds[rng.IntN(len(Kinds))]}
	fresh := func() string {
		dir, _ := pick(rng, l.dirs)
		return joinRel(dir, nm.next())
	}
	inner := without(l.dirs, ".")
	var ok bool
	switch op.Kind {
	case Create, CreateDelete:
		op.Path, op.Data, ok = fresh(), nm.data(), true
		if op.Kind == Create && rng.IntN(3) == 0 {
			op.Path = joinRel(op.Path, nm.next()) // nested: parents made
		}
	case Mkdir:
		op.Path, ok = joinRel(fresh(), nm.next()), true
	case Mkfifo, Socket:
		op.Path, ok = fresh(), true
	case Mknod:
		op.Path, op.N, ok = fresh(), int64(unix.Mkdev(1, uint32(3+2*rng.IntN(2)))), true
	case Modify, Append:
		op.Path, ok = pick(rng, l.files)
		op.Data = nm.data()
		if op.Kind == Append && op.Data == "" {
			op.Data = "+"
		}
	case TruncSame, OpenNoWrite:
		op.Path, ok = pick(rng, l.files)
	case Truncate:
		op.Path, ok = pick(rng, l.files)
		op.N = []int64{0, 3, 1 << 20}[rng.IntN(3)]
	case Chmod:
		op.Path, ok = pick(rng, l.nonLinks)
		op.N = modes[rng.IntN(len(modes))]
		if slices.Contains(l.dirs, op.Path) {
			op.N |= 0o700
		}
	case Chown:
		op.Path, ok = pick(rng, l.all)
		op.N = owners[rng.IntN(len(owners))]
	case Touch:
		op.Path, ok = pick(rng, l.all)
		op.N = OldTime + rng.Int64N(1<<40)
	case Setxattr:
		op.Path, ok = pick(rng, l.nonLinks)
		op.Arg = xattrNames[rng.IntN(len(xattrNames))]
		op.Data = nm.data()
		if op.Arg == "security.capability" {
			op.Data = capV2
		}
	case Removexattr:
		op.Path, ok = pick(rng, l.nonLinks)
		op.Arg = xattrNames[rng.IntN(len(xattrNames))]
	case Delete:
		op.Path, ok = pick(rng, l.nonDirs)
	case RmRf, RmRfRecreate:
		op.Path, ok = pick(rng, inner)
		op.Data = nm.data()
	case Rename:
		op.Path, ok = pick(rng, l.nonDirs)
		op.Arg = fresh()
		if rng.IntN(3) == 0 {
			if to, ok2 := pick(rng, without(l.nonDirs, op.Path)); ok2 {
				op.Arg = to // over an existing file
			}
		}
	case Move:
		op.Path, ok = pick(rng, without(l.all, "."))
		op.Arg = fresh()
		if strings.HasPrefix(op.Arg, op.Path+"/") {
			ok = false
		}
	case Hardlink:
		op.Path, ok = pick(rng, l.files)
		op.Arg = fresh()
	case Symlink:
		op.Arg, ok = fresh(), true
		targets := []string{"n1", "../up", "/nonexistent/abs", "dangling\nname", strings.Repeat("t", 300)}
		if f, ok2 := pick(rng, l.files); ok2 {
			targets = append(targets, f)
		}
		op.Data = targets[rng.IntN(len(targets))]
	case TypeChange:
		op.Path, ok = pick(rng, without(l.all, "."))
		op.Data = nm.data()
	}
	return op, ok
}

func joinRel(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}
