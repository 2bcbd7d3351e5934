package nsrun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// The agent's filesystem view, built by init after the overlay and the masks
// over hidden paths. The host view (describeView): the host read-only, a
// private /tmp, the workspace and the --rw paths writable, a /proc of the
// agent's PID namespace with the container runtimes' masked and read-only
// paths, /sys read-only, and a minimal /dev. The minimal view, the default
// (describeMinimal, view_minimal.go), builds a root of its own around the
// same /proc, /sys and /dev. It is plain data: describeView and
// describeMinimal build the steps, perform carries them out.

// Masked are the paths covered in the agent's view as runc and Docker cover
// them by default: a directory with an empty read-only tmpfs, a file with
// /dev/null. Paths the kernel does not have are skipped.
var Masked = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/sched_debug", "/proc/scsi", "/proc/timer_list", "/proc/timer_stats",
	"/sys/devices/virtual/powercap", "/sys/devices/virtual/tpm", "/sys/firmware",
}

// ReadOnly are the paths of /proc bind-mounted read-only onto themselves, as
// runc and Docker do by default.
var ReadOnly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// Devices are the device nodes of the agent's /dev, each a bind mount of the
// host's node of that name. There is no block device among them.
var Devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// PrivateTmp are the directories the agent gets a private copy of: the
// host's, read-only, under a writable layer of its own (an overlay with a
// tmpfs upper layer), or an empty tmpfs where that overlay cannot be
// mounted. Its writes there never reach the host and end with the run. The
// host's unix sockets there (a tmux or ssh-agent socket in /tmp, a daemon's
// in /run) cannot be connected to through the overlay: its inodes are not
// the sockets' own. Mounts on them on the host are not shown.
var PrivateTmp = []string{"/tmp", "/var/tmp", "/run"}

// viewOp is what one step of the view does.
type viewOp int

const (
	// opReadOnlyHost makes every mount of the namespace read-only.
	opReadOnlyHost viewOp = iota
	// opMount mounts a fresh filesystem: FSType, Source (the device name),
	// Flags, Data on Target.
	opMount
	// opBind bind-mounts Source (recursively) on Target, then sets the
	// bind's own flags to Flags, plus the source's nosuid, nodev and noexec
	// when Keep. A Held source is opened before the first step, so that a
	// later step may cover it.
	opBind
	// opMask covers Target: a directory with an empty read-only tmpfs,
	// anything else with /dev/null.
	opMask
	// opSymlink makes Target a symlink to Source.
	opSymlink
	// opRemount sets the flags of the mount on Target to Flags.
	opRemount
	// opPrivateTmp mounts on Target an overlay of the held Source (read-only
	// lower layer) and a fresh tmpfs (upper layer), with Flags; where the
	// kernel refuses it, an empty tmpfs.
	opPrivateTmp
	// opNewRoot mounts a fresh tmpfs on Target: the steps after it, up to
	// opSwitchRoot, work in it (viewStep.under).
	opNewRoot
	// opMirror makes Target what the held Source is, not following a
	// symlink: a symlink is made again with its target, anything else is
	// bound as opBind binds it.
	opMirror
	// opSwitchRoot makes the new root on Target the namespace's root
	// (switchRoot).
	opSwitchRoot
)

// viewStep is one step of building the agent's view.
type viewStep struct {
	Op     viewOp
	Source string
	Target string
	FSType string
	Flags  uintptr
	Data   string
	// Keep adds the bind source's nosuid, nodev and noexec to Flags.
	Keep bool
	// Held opens Source before the first step.
	Held bool
	// Create makes a missing Target (and its missing parents, 0755): a
	// directory, or for a bind whose source is not one, an empty file.
	Create bool
	// Optional skips the step when Target (a bind's Source) does not exist.
	Optional bool
	// Writable marks a mount the agent may write through; each is nodev.
	Writable bool
	// ReadOnlyTree makes every mount a bind brought along read-only too.
	ReadOnlyTree bool
	// Listed records a bind's Source among the host paths the agent may
	// read (viewResult.ReadOnly).
	Listed bool
	// Fallback is performed instead when the step fails.
	Fallback *viewStep
	// root is the new root's mount point a step works in (under).
	root string
	// Missing, when not empty, is the sentence recorded when the step and
	// its fallback fail; otherwise the failure fails the launch.
	Missing string
}

// view is the list of steps that builds the agent's filesystem view.
type view struct {
	Steps []viewStep
}

// hardened are the flags of the fresh pseudo and scratch filesystems.
const hardened = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// devFlags are the flags of the binds of the host's device nodes: read-only,
// so that the agent cannot chmod or chown the host's nodes (reading and
// writing a device does not need a writable mount).
const devFlags = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NOEXEC

// describeView describes the agent's view for a workspace (already an
// overlay), the hidden host paths (already covered), the writable host paths,
// and terminal, the path of the terminal on init's standard input, which the
// agent inherits, or "".
func describeView(workspace string, hidden, writable []string, terminal string) view {
	var v view
	add := func(s viewStep) { v.Steps = append(v.Steps, s) }
	add(viewStep{Op: opReadOnlyHost, Target: "/",
		Missing: "the host's filesystem could not be made read-only: the agent may write wherever its user may"})
	for _, t := range PrivateTmp {
		add(viewStep{Op: opPrivateTmp, Source: t, Target: t, Flags: unix.MS_NOSUID | unix.MS_NODEV, Held: true,
			Optional: true, Writable: true})
	}
	// The overlay's lower layer shows the host's directory as it is, without
	// the mounts on it: hidden paths there are covered again.
	for _, h := range hidden {
		for _, t := range PrivateTmp {
			if attest.Within(h, t) {
				add(viewStep{Op: opMask, Target: h, Optional: true})
			}
		}
	}
	v.addPseudo(terminal, viewStep{Op: opRemount, Target: "/sys", Flags: unix.MS_RDONLY | hardened})
	// Last, so that no fresh mount covers them (a workspace in /dev/shm,
	// say): the writable paths and the workspace overlay, bound back from
	// descriptors taken before the host went read-only, writable and nodev.
	for _, p := range writable {
		add(viewStep{Op: opBind, Source: p, Target: p, Flags: unix.MS_NODEV, Keep: true, Held: true,
			Create: true, Writable: true})
	}
	add(viewStep{Op: opBind, Source: workspace, Target: workspace, Flags: unix.MS_NODEV, Keep: true, Held: true,
		Create: true, Writable: true})
	return v
}

// addPseudo adds the agent's /proc, /sys and /dev, each made where missing;
// sysFallback is done where a fresh sysfs cannot be mounted.
func (v *view) addPseudo(terminal string, sysFallback viewStep) {
	add := func(s viewStep) { v.Steps = append(v.Steps, s) }
	// A /proc of the agent's PID namespace, with the runtimes' masks and
	// read-only paths.
	add(viewStep{Op: opMount, Source: "proc", Target: "/proc", FSType: "proc", Flags: hardened, Create: true})
	masks := func(prefix string) {
		for _, m := range Masked {
			if strings.HasPrefix(m, prefix) {
				add(viewStep{Op: opMask, Target: m, Optional: true})
			}
		}
	}
	masks("/proc/")
	for _, p := range ReadOnly {
		add(viewStep{Op: opBind, Source: p, Target: p, Flags: unix.MS_RDONLY | hardened, Optional: true})
	}
	// /sys read-only, its runtimes' masks, and the cgroup filesystem
	// read-only: cgroup2 (in a cgroup namespace, the agent's own subtree),
	// else an empty tmpfs. Both are mounted, then made read-only: a
	// superblock shared with the host (the same network namespace, the
	// cgroup2 hierarchy) refuses a read-only mount beside a writable one. In
	// the host's network namespace sysfs is the host's own, which the kernel
	// refuses to mount on itself: the host's /sys, read-only, stays then
	// (sysFallback).
	add(viewStep{Op: opMount, Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: hardened, Create: true,
		Fallback: &sysFallback})
	add(viewStep{Op: opRemount, Target: "/sys", Flags: unix.MS_RDONLY | hardened})
	masks("/sys/")
	add(viewStep{Op: opMount, Source: "cgroup2", Target: "/sys/fs/cgroup", FSType: "cgroup2", Flags: hardened, Optional: true,
		Fallback: &viewStep{Op: opMount, Source: "layerseal-nocgroup", Target: "/sys/fs/cgroup", FSType: "tmpfs",
			Flags: hardened, Data: "size=0,nr_inodes=1,mode=0555"}})
	add(viewStep{Op: opRemount, Target: "/sys/fs/cgroup", Flags: unix.MS_RDONLY | hardened, Optional: true})
	// A minimal /dev: a tmpfs holding binds of the host's character devices
	// (each its own mount, the only ones without nodev), a devpts instance
	// of its own, a private /dev/shm and the usual links; no block device.
	// It ends read-only.
	add(viewStep{Op: opMount, Source: "layerseal-dev", Target: "/dev", FSType: "tmpfs", Flags: hardened,
		Data: "mode=0755,size=64k", Create: true})
	for _, d := range Devices {
		add(viewStep{Op: opBind, Source: "/dev/" + d, Target: "/dev/" + d, Flags: devFlags,
			Held: true, Create: true, Optional: true})
	}
	if terminal != "" {
		// As runc does for a container's console: the terminal the agent
		// is given, at /dev/console, so that ttyname(3) finds it.
		add(viewStep{Op: opBind, Source: terminal, Target: "/dev/console", Flags: devFlags, Held: true, Create: true})
	}
	add(viewStep{Op: opMount, Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC,
		Data: "newinstance,ptmxmode=0666,mode=0620,gid=5", Create: true})
	add(viewStep{Op: opSymlink, Source: "pts/ptmx", Target: "/dev/ptmx"})
	add(viewStep{Op: opMount, Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Flags: hardened, Data: "mode=1777",
		Create: true, Writable: true})
	for _, l := range [][2]string{{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
		{"/proc/self/fd/2", "stderr"}} {
		add(viewStep{Op: opSymlink, Source: l[0], Target: "/dev/" + l[1]})
	}
	add(viewStep{Op: opRemount, Target: "/dev", Flags: unix.MS_RDONLY | hardened})
}

// viewResult is what perform put in place.
type viewResult struct {
	ReadOnlyHost bool
	Missing      []string
	// ReadOnly are the Listed sources bound, in order.
	ReadOnly []string
	// RootMoved reports that opNewRoot moved the new root over the old one
	// instead of pivoting: the agent stage must enter it (enterMovedRoot).
	RootMoved bool
}

// perform carries out the steps in order.
func (v view) perform() (viewResult, error) {
	var res viewResult
	held := map[string]*os.File{}
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	var all []viewStep
	for _, s := range v.Steps {
		all = append(all, s)
		if s.Fallback != nil {
			all = append(all, *s.Fallback)
		}
	}
	for _, s := range all {
		if !s.Held {
			continue
		}
		if _, ok := held[s.Source]; ok {
			continue
		}
		flags := unix.O_PATH
		if s.Op == opMirror {
			flags |= unix.O_NOFOLLOW
		}
		fd, err := linux.Openat(unix.AT_FDCWD, s.Source, flags)
		if err != nil {
			if s.Optional && errors.Is(err, unix.ENOENT) {
				continue
			}
			return res, err
		}
		held[s.Source] = os.NewFile(uintptr(fd), s.Source)
	}
	root := "" // the new root's mount point, once opNewRoot made it
	for _, s := range v.Steps {
		if root != "" && s.Op != opSwitchRoot {
			s = s.under(root)
		}
		err := s.perform(held, &res)
		if s.Op == opNewRoot && err == nil {
			root = s.Target
		}
		if s.Op == opSwitchRoot {
			root = ""
		}
		if err != nil && s.Fallback != nil {
			err = s.Fallback.perform(held, &res)
		}
		if err != nil {
			if s.Missing == "" {
				return res, err
			}
			res.Missing = append(res.Missing, fmt.Sprintf("%s (%v)", s.Missing, err))
		}
	}
	return res, nil
}

// perform carries out one step.
func (s viewStep) perform(held map[string]*os.File, res *viewResult) error {
	if s.Op == opReadOnlyHost {
		if err := readOnlyHost(); err != nil {
			return err
		}
		res.ReadOnlyHost = true
		return nil
	}
	if s.Optional && s.Op != opBind && s.Op != opMirror {
		var st unix.Stat_t
		if err := unix.Lstat(s.Target, &st); errors.Is(err, unix.ENOENT) {
			return nil
		}
	}
	switch s.Op {
	case opMount:
		if s.Create {
			if err := os.MkdirAll(s.Target, 0o755); err != nil {
				return err
			}
		}
		return linux.Mount(s.Source, s.Target, s.FSType, s.Flags, s.Data)
	case opMask:
		if s.root != "" {
			return hideUnder(s.root, s.Target)
		}
		_, err := hide(s.Target)
		return err
	case opSymlink:
		if err := os.Symlink(s.Source, s.Target); err != nil {
			return fmt.Errorf("make the symlink %q: %w", s.Target, err)
		}
		return nil
	case opRemount:
		return linux.Mount("", s.Target, "", unix.MS_REMOUNT|unix.MS_BIND|s.Flags, "")
	case opPrivateTmp:
		return s.privateTmp(held)
	case opNewRoot:
		return linux.Mount("layerseal-root", s.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755")
	case opSwitchRoot:
		moved, err := switchRoot(s.Target)
		// What the new root holds of the host is bound read-only.
		res.RootMoved, res.ReadOnlyHost = moved, err == nil
		return err
	case opMirror:
		return s.mirror(held, res)

	case opBind:
		if err := s.bind(held); err != nil {
			return err
		}
		if s.Listed && held[s.Source] != nil {
			res.ReadOnly = append(res.ReadOnly, s.Source)
		}
		return nil
	}
	return fmt.Errorf("unknown view step %d", s.Op)
}

// bind carries out an opBind step.
func (s viewStep) bind(held map[string]*os.File) error {
	f := held[s.Source]
	if f == nil {
		if !s.Held {
			fd, err := linux.Openat(unix.AT_FDCWD, s.Source, unix.O_PATH)
			if err != nil {
				if s.Optional && errors.Is(err, unix.ENOENT) {
					return nil
				}
				return err
			}
			f = os.NewFile(uintptr(fd), s.Source)
			defer f.Close()
		} else if s.Optional {
			return nil
		} else {
			return fmt.Errorf("bind source %q was not opened", s.Source)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %q: %w", s.Source, err)
	}
	if s.Create {
		if err := createTarget(s.Target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
	}
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	if err := linux.Mount(src, s.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %q: %w", s.Source, err)
	}
	flags := s.Flags
	if s.Keep {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
			return fmt.Errorf("statfs %q: %w", s.Source, err)
		}
		flags |= keptFlags(fs.Flags)
	}
	if err := linux.Mount("", s.Target, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return err
	}
	if s.ReadOnlyTree {
		return readOnlyTree(s.Target)
	}
	return nil
}

// keptFlags are the nosuid, nodev and noexec of statfs flags, as mount flags.
func keptFlags(st int64) uintptr {
	var f uintptr
	for _, m := range []struct {
		st    int64
		mount uintptr
	}{{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC}} {
		if st&m.st != 0 {
			f |= m.mount
		}
	}
	return f
}

// createTarget makes path, and its missing parents, when it does not exist:
// a directory, or an empty file. It runs before the agent does, in
// filesystems init mounted itself.
func createTarget(path string, dir bool) error {
	if _, err := os.Lstat(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if dir {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// readOnlyHost makes every mount of init's namespace read-only: at once with
// mount_setattr(2) where the kernel has it, otherwise by remounting each
// mount point of the mount table read-only, keeping its nosuid, nodev and
// noexec. Mounts covered by others are out of reach for the agent too.
func readOnlyHost() error {
	return readOnlyTree("/")
}

// readOnlyTree makes the mount on path and every mount under it read-only,
// as readOnlyHost does for "/".
func readOnlyTree(path string) error {
	if err := linux.MountSetattr(path, true, unix.MOUNT_ATTR_RDONLY, 0); err == nil {
		return nil
	}
	return remountReadOnlyUnder(path)
}

// remountEachReadOnly remounts each reachable mount point read-only, keeping
// its nosuid, nodev and noexec.
func remountEachReadOnly() error {
	return remountReadOnlyUnder("/")
}

// remountReadOnlyUnder remounts each reachable mount point at or under path
// read-only, keeping its nosuid, nodev and noexec.
func remountReadOnlyUnder(path string) error {
	infos, ierr := mountinfo.GetMounts(func(in *mountinfo.Info) (skip, stop bool) {
		return !attest.Within(in.Mountpoint, path), false
	})
	if ierr != nil {
		return fmt.Errorf("read mount table: %w", ierr)
	}
	var failed []string
	for _, mp := range mountPoints(infos) {
		var fs unix.Statfs_t
		if err := unix.Statfs(mp, &fs); err != nil {
			failed = append(failed, fmt.Sprintf("%q: %v", mp, err))
			continue
		}
		if fs.Flags&unix.ST_RDONLY != 0 {
			continue
		}
		if err := linux.Mount("", mp, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|keptFlags(fs.Flags), ""); err != nil {
			failed = append(failed, fmt.Sprintf("%q: %v", mp, err))
		}
	}
	if failed != nil {
		return fmt.Errorf("mounts left writable: %s", strings.Join(failed, ", "))
	}
	return nil
}

// mountPoints are the distinct mount points of a mount table, parents first.
func mountPoints(infos []*mountinfo.Info) []string {
	var out []string
	for _, in := range infos {
		out = append(out, in.Mountpoint)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ErrWritable is wrapped by the errors of CheckWritable.
var ErrWritable = errors.New("writable path (--rw)")

// CheckWritable checks the host paths the agent may write (--rw) before
// anything starts, and returns them with symlinks resolved. Each must exist;
// none may be the workspace, lie inside it or hold it, nor overlap one of
// reserved (layerseal's own paths, each mapped to what it is: "state dir",
// "key", …), nor lie under /proc, /sys or /dev, which the agent gets fresh.
// A path that holds the workspace or a reserved path is refused too: the
// agent could rename its parts on the host.
func CheckWritable(paths []string, workspace string, reserved map[string]string) ([]string, error) {
	return checkHostPaths(paths, workspace, reserved, true)
}

// checkWritable runs CheckWritable and CheckReadOnly on c's writable and
// read-only paths, the hidden paths reserved, and keeps the resolved paths.
func (c *Config) checkWritable() error {
	reserved := map[string]string{}
	for _, h := range c.Hide {
		reserved[h] = "hidden path"
	}
	w, err := CheckWritable(c.Sandbox.Writable, c.Workspace, reserved)
	if err != nil {
		return err
	}
	c.Sandbox.Writable = w
	c.Sandbox.ReadOnly, err = CheckReadOnly(c.Sandbox.ReadOnly, c.Workspace, reserved)
	return err
}

// privateTmp carries out an opPrivateTmp step: a tmpfs on Target holds the
// upper and work dirs, then the overlay covers it.
func (s viewStep) privateTmp(held map[string]*os.File) error {
	lower := held[s.Source]
	if lower == nil {
		return nil // Optional, and missing
	}
	if err := linux.Mount("layerseal-tmp", s.Target, "tmpfs", s.Flags, "mode=0700"); err != nil {
		return err
	}
	var dirs [2]*os.File
	for i, name := range []string{"upper", "work"} {
		p := filepath.Join(s.Target, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		dirs[i] = f
	}
	// The merged root shows the upper root's mode and owner.
	if err := unix.Chmod(filepath.Join(s.Target, "upper"), 0o1777); err != nil { // os.Chmod would drop the sticky bit
		return err
	}
	fd := func(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }
	data := "lowerdir=" + fd(lower) + ",upperdir=" + fd(dirs[0]) + ",workdir=" + fd(dirs[1])
	if err := linux.Mount("layerseal-tmp", s.Target, "overlay", s.Flags, data); err == nil {
		return nil
	}
	// No overlay here: an empty tmpfs instead.
	if err := unix.Unmount(s.Target, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %q: %w", s.Target, err)
	}
	return linux.Mount("layerseal-tmp", s.Target, "tmpfs", s.Flags, "mode=1777")
}
