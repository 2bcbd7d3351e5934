package nsrun

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
)

// The minimal view (the default) is a root built for the agent rather than
// the host's made read-only: a fresh tmpfs holding, read-only, the host's
// [SystemDirs] with the secrets of /etc masked ([EtcSecrets], and whatever
// under /etc others may not read); a /proc, /sys and /dev as in the host
// view; private, empty /tmp, /var/tmp (mode 1777) and /run (0755); an
// empty home of the agent's own; the read-only and writable paths the
// caller names; and the workspace overlay, each at its own host path.
// Nothing else of the host is there: no /root, /home, /var/lib, /srv,
// /mnt, /media, and no state dir, key or output dir.

// SystemDirs are the host's directories of programs and libraries the
// minimal view shows read-only at their own paths, those the host has: a
// directory is bound with the mounts under it (each read-only), a symlink
// (a merged /usr's /bin -> usr/bin) is made again with its target.
func SystemDirs() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/etc"}
}

// EtcSecrets are the paths of /etc the minimal view masks whatever their
// mode, those the host has: password and group shadows and their backups,
// sudo's rules, old passwords, and Kerberos and TLS keys. A pattern's
// matches are masked but for public keys (*.pub). Besides them, every
// file under /etc that others may not read, and every directory they may
// not list or enter, is masked too: there the host keeps what only its
// administrator may read (/etc/ssl/private, /etc/mysql/debian.cnf, a
// WireGuard or NetworkManager connection's keys, apt's auth.conf, …).
func EtcSecrets() []string {
	return []string{
		"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
		"/etc/security/opasswd", "/etc/ssh/*key*", "/etc/ssl/private", "/etc/krb5.keytab",
		"/etc/apt/auth.conf", "/etc/apt/auth.conf.d", "/etc/credstore", "/etc/credstore.encrypted",
	}
}

// etcSecrets lists the paths under etc (the host's /etc) the minimal view
// masks (see EtcSecrets), sorted, none under another. It reads only
// modes: an unreadable directory is masked whole.
func etcSecrets(etc string) []string {
	var out []string
	for _, s := range EtcSecrets() {
		s = filepath.Join(etc, strings.TrimPrefix(s, "/etc"))
		matches, _ := filepath.Glob(s) // the patterns are well formed
		for _, m := range matches {
			if !strings.HasSuffix(m, ".pub") {
				out = append(out, m)
			}
		}
	}
	_ = filepath.WalkDir(etc, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		perm := fi.Mode().Perm()
		switch {
		case d.IsDir() && perm&0o005 != 0o005:
			out = append(out, p)
			return fs.SkipDir
		case !d.IsDir() && perm&0o004 == 0:
			out = append(out, p)
		}
		return nil
	})
	slices.Sort(out)
	out = slices.Compact(out)
	// The first of a run of paths under one masked directory stands for
	// them all.
	var kept []string
	for _, p := range out {
		if len(kept) == 0 || !attest.Within(p, kept[len(kept)-1]) {
			kept = append(kept, p)
		}
	}
	return kept
}

// etcSecretsAsync runs etcSecrets("/etc") in the background, for view, and
// sends its result; nothing for another view than the minimal one.
func etcSecretsAsync(view string) <-chan []string {
	c := make(chan []string, 1)
	if view == ViewMinimal {
		go func() { c <- etcSecrets("/etc") }()
	}
	return c
}

// minimal is what describeMinimal builds a view of.
type minimal struct {
	// Root is the mount point of the new root while it is built (see
	// scratchFor).
	Root string
	// Workspace is the overlay's path.
	Workspace string
	// ReadOnly and Writable are the host paths the caller named.
	ReadOnly, Writable []string
	// Secrets are the paths masked (etcSecrets).
	Secrets []string
	// Follow are host files /etc links to that lie outside the view
	// (/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf): each
	// bound read-only at its own path.
	Follow []string
	// Home is the agent's HOME, "" for none, and UID and GID its owner.
	Home     string
	UID, GID uint32
	// Terminal is the path of init's terminal, or "" (see describeView).
	Terminal string
}

// describeMinimal describes the minimal view: its first step mounts the new
// root on m.Root (every bind's host source is held open before), the steps
// after it build the view there, and the last one makes it the root.
func describeMinimal(m minimal) view {
	var v view
	add := func(s viewStep) { v.Steps = append(v.Steps, s) }
	add(viewStep{Op: opNewRoot, Target: m.Root})
	v.addPseudo(m.Terminal, viewStep{Op: opBind, Source: "/sys", Target: "/sys", Flags: unix.MS_RDONLY | hardened,
		Held: true, ReadOnlyTree: true})
	for _, d := range SystemDirs() {
		add(viewStep{Op: opMirror, Source: d, Target: d, Flags: unix.MS_RDONLY | unix.MS_NODEV, Keep: true,
			Held: true, Create: true, Optional: true, ReadOnlyTree: true, Listed: true})
	}
	for _, s := range m.Secrets {
		add(viewStep{Op: opMask, Target: s, Optional: true})
	}
	for _, t := range PrivateTmp {
		mode := "mode=1777"
		if t == "/run" {
			mode = "mode=0755"
		}
		add(viewStep{Op: opMount, Source: "layerseal-tmp", Target: t, FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV,
			Data: mode, Create: true, Writable: true})
	}
	for _, f := range m.Follow {
		add(viewStep{Op: opBind, Source: f, Target: f, Flags: unix.MS_RDONLY | unix.MS_NODEV, Keep: true, Held: true,
			Create: true, Optional: true, Listed: true})
	}
	if m.Home != "" {
		add(viewStep{Op: opMount, Source: "layerseal-home", Target: m.Home, FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV,
			Data: fmt.Sprintf("mode=0700,uid=%d,gid=%d", m.UID, m.GID), Create: true, Writable: true})
	}
	// Last, parents before what lies in them, so that no later mount
	// covers them: the named paths, then the workspace overlay.
	type named struct {
		path     string
		writable bool
	}
	var ns []named
	for _, p := range m.ReadOnly {
		ns = append(ns, named{p, false})
	}
	for _, p := range m.Writable {
		ns = append(ns, named{p, true})
	}
	slices.SortStableFunc(ns, func(a, b named) int { return strings.Compare(a.path, b.path) })
	for _, n := range ns {
		if n.writable {
			add(viewStep{Op: opBind, Source: n.path, Target: n.path, Flags: unix.MS_NODEV, Keep: true, Held: true,
				Create: true, Writable: true})
		} else {
			add(viewStep{Op: opBind, Source: n.path, Target: n.path, Flags: unix.MS_RDONLY | unix.MS_NODEV, Keep: true,
				Held: true, Create: true, ReadOnlyTree: true, Listed: true})
		}
	}
	add(viewStep{Op: opBind, Source: m.Workspace, Target: m.Workspace, Flags: unix.MS_NODEV, Keep: true, Held: true,
		Create: true, Writable: true})
	add(viewStep{Op: opSwitchRoot, Target: m.Root})
	// The root ends read-only: what the agent may write has a mount of
	// its own.
	add(viewStep{Op: opRemount, Target: "/", Flags: unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
	return v
}

// minimalFor gathers what describeMinimal needs from cfg, the host and
// secrets (etcSecrets): the agent's home (its environment's HOME, or
// DefaultEnv's), left out when it is "/", the workspace or a named path or
// lies in one; and the target of /etc/resolv.conf when it lies outside the
// view.
func minimalFor(cfg *Config, sb Sandbox, terminal string, secrets []string) minimal {
	sources := append([]string{cfg.Workspace}, append(sb.ReadOnly, sb.Writable...)...)
	m := minimal{Root: scratchFor(sources), Workspace: cfg.Workspace, ReadOnly: sb.ReadOnly, Writable: sb.Writable,
		Terminal: terminal, UID: cfg.Process.User.UID, GID: cfg.Process.User.GID, Secrets: secrets}
	env := cfg.Process.Env
	if env == nil {
		env = DefaultEnv(m.UID, "")
	}
	for _, kv := range env {
		if h, ok := strings.CutPrefix(kv, "HOME="); ok {
			m.Home = h
		}
	}
	if !filepath.IsAbs(m.Home) || filepath.Clean(m.Home) != m.Home || m.Home == "/" {
		m.Home = ""
	}
	for _, p := range append(sources, "/proc", "/sys", "/dev") {
		if m.Home != "" && attest.Within(m.Home, p) {
			m.Home = ""
		}
	}
	if r, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && r != "/etc/resolv.conf" && !inView(r) {
		m.Follow = append(m.Follow, r)
	}
	return m
}

// scratchFor is where the new root is built: the first host directory of
// /tmp, /mnt, /run, /var/tmp that none of sources (the host paths bound
// with the mounts under them) holds, since a bind would bring the new root
// along; "/tmp" when there is none (the launch then fails naming it).
func scratchFor(sources []string) string {
	for _, c := range []string{"/tmp", "/mnt", "/run", "/var/tmp"} {
		fi, err := os.Lstat(c)
		if err != nil || !fi.IsDir() || slices.ContainsFunc(sources, func(s string) bool { return attest.Within(c, s) }) {
			continue
		}
		return c
	}
	return "/tmp"
}

// inView reports whether host path p lies in a directory the minimal view
// shows (SystemDirs, followed through their symlinks).
func inView(p string) bool {
	for _, d := range SystemDirs() {
		if r, err := filepath.EvalSymlinks(d); err == nil && attest.Within(p, r) {
			return true
		}
	}
	return false
}

// under is s as performed in the new root mounted on root: its target
// (and a fallback's) lies there, and so does a bind's source that is not
// held (a path of the new /proc). Held sources are the host's.
func (s viewStep) under(root string) viewStep {
	s.root = root
	s.Target = filepath.Join(root, s.Target)
	if s.Op == opBind && !s.Held {
		s.Source = filepath.Join(root, s.Source)
	}
	if s.Fallback != nil {
		f := s.Fallback.under(root)
		s.Fallback = &f
	}
	return s
}

// hideUnder covers target, a path in the new root mounted on root, as
// hide does. A symlink there is resolved as the host resolves the same
// path (the new root's /etc and system directories are the host's own,
// bound at their own paths), and the mask put on what that is in the new
// root, when it is there.
func hideUnder(root, target string) error {
	rel := strings.TrimPrefix(target, root)
	real, err := filepath.EvalSymlinks(rel)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resolve hidden path %q: %w", rel, err)
	}
	p := filepath.Join(root, real)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	_, err = hide(p)
	return err
}

// switchRoot makes the new root mounted on mp the root of init's mount
// namespace, as runc does: pivot_root(2) with the new root as both
// arguments, then the old root, stacked on it, detached. No mount of the
// old root is left in the namespace then, and no process in it can reach
// one again (pivot_root moves every root and working directory that was
// the old root, the agent stage's too). The view is built before, while
// the old root is there: the kernel binds no mount it detached, and the
// agent stage, started before, may still be loading its libraries.
//
// pivot_root refuses (EINVAL) where the namespace's root is the initial
// ramfs (a guest booted from an initramfs has nothing else): there the new
// root is moved over the old one (MS_MOVE onto "/") and init changes its
// root into it (chroot), as runc does without pivot_root, and reports that
// it did (moved). What that guarantees: a path, ".." included, from the new
// root never leads out of it (a lookup that goes above "/" lands on the
// mount on top of it, the new root); the old root and the mounts under it
// stay attached beneath, out of reach of any path, and no process of the
// agent's holds a descriptor of them. What it does not: the agent stage
// must change its root as well (enterMovedRoot); the agent runs in a
// chroot, which the kernel treats as such (it cannot make a user
// namespace); and an agent holding CAP_SYS_ADMIN could unmount the new
// root, though it would stay inside it.
func switchRoot(mp string) (moved bool, err error) {
	oldRoot, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open the old root: %w", err)
	}
	defer unix.Close(oldRoot)
	if err := unix.Chdir(mp); err != nil {
		return false, fmt.Errorf("enter the new root: %w", err)
	}
	err = unix.PivotRoot(".", ".")
	if errors.Is(err, unix.EINVAL) {
		if err := moveRoot(); err != nil {
			return false, fmt.Errorf("pivot_root refused, and %w", err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("pivot_root: %w", err)
	}
	// "." is the old root now, stacked on the new one; leave the kernel no
	// choice of which.
	if err := unix.Fchdir(oldRoot); err != nil {
		return false, fmt.Errorf("enter the old root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("detach the old root: %w", err)
	}
	return false, unix.Chdir("/")
}

// moveRoot moves the mount on the working directory over the root and
// makes it the calling thread's root (switchRoot's fallback).
func moveRoot() error {
	if err := linux.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the new root over the old one failed: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot into the new root: %w", err)
	}
	return unix.Chdir("/")
}

// enterMovedRoot makes the calling process's root the mount on top of its
// root (the root newRoot moved there): ".." from the root lands on it.
// It fails when the root does not change.
func enterMovedRoot() error {
	var before, after unix.Stat_t
	if err := unix.Stat("/", &before); err != nil {
		return fmt.Errorf("stat the root: %w", err)
	}
	if err := unix.Chdir("/.."); err != nil {
		return fmt.Errorf("enter the new root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot into the new root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Stat("/", &after); err != nil {
		return fmt.Errorf("stat the new root: %w", err)
	}
	if after.Dev == before.Dev && after.Ino == before.Ino {
		return errors.New("the agent stage could not enter the new root")
	}
	return nil
}

// mirror carries out an opMirror step.
func (s viewStep) mirror(held map[string]*os.File, res *viewResult) error {
	f := held[s.Source]
	if f == nil {
		return nil // Optional, and missing
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %q: %w", s.Source, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		b := s
		b.Op = opBind
		if err := b.bind(held); err != nil {
			return err
		}
		if s.Listed {
			res.ReadOnly = append(res.ReadOnly, s.Source)
		}
		return nil
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(int(f.Fd()), "", buf)
	if err != nil {
		return fmt.Errorf("read the symlink %q: %w", s.Source, err)
	}
	if err := os.MkdirAll(filepath.Dir(s.Target), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(string(buf[:n]), s.Target); err != nil {
		return fmt.Errorf("make the symlink %q: %w", s.Target, err)
	}
	return nil
}
