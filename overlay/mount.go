package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
)

// Pinned are the options every layerseal overlay is mounted with, in the
// order they are passed. Each is passed explicitly because module parameters
// can change the defaults at run time.
var Pinned = []string{
	"redirect_dir=nofollow",
	"metacopy=off",
	"index=off",
	"nfs_export=off",
	"xino=off",
	"uuid=null",
}

// required are the pinned options without which the upper layer cannot be
// read by this package's rules: a kernel that refuses one of them is not
// used at all.
var required = map[string]bool{"redirect_dir": true, "metacopy": true, "index": true}

// dropOrder is the order in which droppable options are given up when the
// kernel refuses the option set without saying which option it refused:
// newest kernel feature first.
var dropOrder = []string{"uuid", "xino", "nfs_export"}

// ErrRequiredOption is wrapped by errors from Perform when the kernel refuses
// one of redirect_dir, metacopy or index.
var ErrRequiredOption = errors.New("kernel refuses a required overlay option")

// ErrMismatch is wrapped by errors from Verify and Match when the mount table
// does not show the overlay that was asked for.
var ErrMismatch = errors.New("overlay mount does not match its description")

// Mount describes an overlay mount with a single lower layer. It is plain
// data: NewMount builds it, Perform carries it out.
type Mount struct {
	Lower, Upper, Work, Target string // absolute, clean paths
	// Options are the overlay options to try, lowerdir/upperdir/workdir
	// excluded, in the order they are passed to the kernel.
	Options []string
	// Unprivileged marks a mount made in a user namespace: overlay then keeps
	// its bookkeeping in user.overlay.* xattrs ("userxattr").
	Unprivileged bool
}

// Mounted is what Perform actually mounted.
type Mounted struct {
	Options []string // options the kernel accepted and the mount table shows
	Missing []string // pinned options the kernel refused and that were dropped
}

// NewMount describes an overlay of upper on lower, with work as overlay's work
// directory, to be mounted on target, with the Pinned options (and userxattr
// when unprivileged). It never adds "volatile".
func NewMount(lower, upper, work, target string, unprivileged bool) Mount {
	opts := slices.Clone(Pinned)
	if unprivileged {
		opts = append(opts, "userxattr")
	}
	return Mount{Lower: lower, Upper: upper, Work: work, Target: target, Options: opts, Unprivileged: unprivileged}
}

// Validate checks the description alone, without looking at the filesystem:
// paths absolute, clean and free of NUL; the three layers distinct and not
// nested in one another; only known options, each key once, never volatile;
// all of redirect_dir, metacopy, index present and off (redirect_dir
// nofollow); userxattr exactly when Unprivileged.
func (m Mount) Validate() error {
	dirs := []struct{ name, path string }{{"lower", m.Lower}, {"upper", m.Upper}, {"work", m.Work}, {"target", m.Target}}
	for _, d := range dirs {
		if d.path == "" || !filepath.IsAbs(d.path) || filepath.Clean(d.path) != d.path || strings.IndexByte(d.path, 0) >= 0 {
			return fmt.Errorf("overlay %s dir %q: not an absolute, clean path", d.name, d.path)
		}
	}
	for i := range 3 {
		for j := range 3 {
			if i != j && attest.Within(dirs[i].path, dirs[j].path) {
				return fmt.Errorf("overlay %s dir %q lies within %s dir %q", dirs[i].name, dirs[i].path, dirs[j].name, dirs[j].path)
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range m.Options {
		k, v, _ := strings.Cut(o, "=")
		if seen[k] {
			return fmt.Errorf("overlay option %q given twice", k)
		}
		seen[k] = true
		switch {
		case k == "userxattr" && o == k:
			if !m.Unprivileged {
				return fmt.Errorf("overlay option %q is only for unprivileged mounts", o)
			}
		case k == "redirect_dir" && v == "nofollow", k == "metacopy" && v == "off", k == "index" && v == "off",
			k == "nfs_export" && v == "off", k == "xino" && v == "off", k == "uuid" && v == "null":
		default:
			return fmt.Errorf("overlay option %q is not allowed", o)
		}
	}
	for k := range required {
		if !seen[k] {
			return fmt.Errorf("overlay option %q missing", k)
		}
	}
	if m.Unprivileged && !seen["userxattr"] {
		return fmt.Errorf("unprivileged overlay without option %q", "userxattr")
	}
	return nil
}

// Perform mounts the overlay on m.Target and checks the result in the mount
// table. First it checks that upper and work are empty directories on one
// filesystem and copies the lower root's mode, owner and times to the upper
// root, since the merged root shows the upper root's own metadata.
//
// Options the kernel refuses are found by trying: a refused option among
// nfs_export, xino and uuid is dropped and reported in Mounted.Missing; a
// refused redirect_dir, metacopy or index fails with ErrRequiredOption. The
// new mount API (fsopen) is used where the kernel has it, so paths may hold
// commas; mount(2) is the fallback.
func (m Mount) Perform() (Mounted, error) {
	if err := m.Validate(); err != nil {
		return Mounted{}, err
	}
	if err := m.prepare(); err != nil {
		return Mounted{}, err
	}
	opts := slices.Clone(m.Options)
	var missing []string
	for {
		err := m.mountOnce(opts)
		if err == nil {
			break
		}
		var oe *optionError
		drop := ""
		switch {
		case errors.As(err, &oe):
			key, _, _ := strings.Cut(oe.option, "=")
			if required[key] || key == "userxattr" {
				return Mounted{}, fmt.Errorf("%w: %w", ErrRequiredOption, err)
			}
			drop = oe.option
		case errors.Is(err, unix.EINVAL):
			for _, k := range dropOrder {
				if i := slices.IndexFunc(opts, func(o string) bool { return strings.HasPrefix(o, k+"=") }); i >= 0 {
					drop = opts[i]
					break
				}
			}
		}
		if drop == "" {
			if len(missing) > 0 {
				return Mounted{}, fmt.Errorf("%w (after dropping %q)", err, missing)
			}
			return Mounted{}, err
		}
		opts = slices.DeleteFunc(opts, func(o string) bool { return o == drop })
		missing = append(missing, drop)
	}
	if err := m.Verify(opts); err != nil {
		_ = unix.Unmount(m.Target, unix.MNT_DETACH)
		return Mounted{}, err
	}
	return Mounted{Options: opts, Missing: missing}, nil
}

// prepare checks the upper and work dirs and gives the upper root the lower
// root's metadata.
func (m Mount) prepare() error {
	var lo, up, wk unix.Stat_t
	if err := unix.Lstat(m.Lower, &lo); err != nil {
		return fmt.Errorf("stat overlay lower dir %q: %w", m.Lower, err)
	}
	if lo.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("overlay lower dir %q: not a directory", m.Lower)
	}
	for _, d := range []struct {
		path string
		st   *unix.Stat_t
	}{{m.Upper, &up}, {m.Work, &wk}} {
		if err := unix.Lstat(d.path, d.st); err != nil {
			return fmt.Errorf("stat overlay dir %q: %w", d.path, err)
		}
		if d.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("overlay dir %q: not a directory", d.path)
		}
		f, err := os.Open(d.path)
		if err != nil {
			return fmt.Errorf("open overlay dir %q: %w", d.path, err)
		}
		names, err := f.Readdirnames(1)
		f.Close()
		if len(names) > 0 {
			return fmt.Errorf("overlay dir %q: not empty", d.path)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read overlay dir %q: %w", d.path, err)
		}
	}
	if up.Dev != wk.Dev {
		return fmt.Errorf("overlay upper dir %q and work dir %q: not on one filesystem", m.Upper, m.Work)
	}
	if err := unix.Lchown(m.Upper, int(lo.Uid), int(lo.Gid)); err != nil {
		return fmt.Errorf("chown overlay upper dir %q: %w", m.Upper, err)
	}
	if err := unix.Chmod(m.Upper, lo.Mode&07777); err != nil {
		return fmt.Errorf("chmod overlay upper dir %q: %w", m.Upper, err)
	}
	ts := []unix.Timespec{lo.Atim, lo.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, m.Upper, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of overlay upper dir %q: %w", m.Upper, err)
	}
	return nil
}

// optionError is a mount failure the kernel attributed to one option.
type optionError struct {
	option string
	err    error
}

func (e *optionError) Error() string {
	return fmt.Sprintf("overlay option %q refused: %v", e.option, e.err)
}

func (e *optionError) Unwrap() error { return e.err }

// escape quotes a layer path for overlay's option parser, which removes one
// backslash before any character; in lowerdir an unescaped ':' separates
// layers and, in mount(2) data, an unescaped ',' separates options.
func escape(p string, special string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' || strings.IndexByte(special, p[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// mountOnce tries one option set, with fsopen or, where the kernel lacks it,
// mount(2).
func (m Mount) mountOnce(opts []string) error {
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if errors.Is(err, unix.ENOSYS) {
		return m.mountLegacy(opts)
	}
	if err != nil {
		return fmt.Errorf("fsopen %q: %w", "overlay", err)
	}
	defer unix.Close(fd)
	set := func(key, value string, flag bool) error {
		var err error
		if flag {
			err = unix.FsconfigSetFlag(fd, key)
		} else {
			err = unix.FsconfigSetString(fd, key, value)
		}
		if err != nil {
			return fmt.Errorf("fsconfig %s=%q: %w%s", key, value, err, kernelLog(fd))
		}
		return nil
	}
	for _, l := range []struct{ key, value string }{
		{"lowerdir", escape(m.Lower, ":")}, {"upperdir", escape(m.Upper, "")}, {"workdir", escape(m.Work, "")},
	} {
		if err := set(l.key, l.value, false); err != nil {
			if errors.Is(err, unix.EINVAL) && strings.Contains(l.value, ",") {
				// Before Linux 6.5 overlay takes fsconfig options through
				// the legacy text buffer, which refuses commas in values;
				// mount(2) data can escape them.
				return m.mountLegacy(opts)
			}
			return err
		}
	}
	for _, o := range opts {
		k, v, hasValue := strings.Cut(o, "=")
		if err := set(k, v, !hasValue); err != nil {
			return &optionError{option: o, err: err}
		}
	}
	if err := unix.FsconfigCreate(fd); err != nil {
		return fmt.Errorf("create overlay for %q: %w%s", m.Target, err, kernelLog(fd))
	}
	mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount overlay for %q: %w%s", m.Target, err, kernelLog(fd))
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount overlay to %q: %w", m.Target, err)
	}
	return nil
}

// kernelLog drains the messages the kernel left on a filesystem context,
// formatted as a suffix for an error message.
func kernelLog(fd int) string {
	var msgs []string
	buf := make([]byte, 4096)
	for range 16 {
		n, err := unix.Read(fd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (kernel: %q)", strings.Join(msgs, "; "))
}

// mountLegacy mounts with mount(2), which cannot tell which option it refused.
func (m Mount) mountLegacy(opts []string) error {
	data := "lowerdir=" + escape(m.Lower, ":,") + ",upperdir=" + escape(m.Upper, ",") + ",workdir=" + escape(m.Work, ",")
	if len(opts) > 0 {
		data += "," + strings.Join(opts, ",")
	}
	if err := unix.Mount("overlay", m.Target, "overlay", 0, data); err != nil {
		return fmt.Errorf("mount overlay on %q with %q: %w", m.Target, opts, err)
	}
	return nil
}

// Verify checks that the topmost mount on m.Target in /proc/self/mountinfo
// is this overlay with exactly the options used (see Match).
func (m Mount) Verify(used []string) error {
	// Every entry on the target, not just the first: a workspace that is
	// itself a mount point has the overlay stacked over its own mount.
	infos, err := mountinfo.GetMounts(func(in *mountinfo.Info) (skip, stop bool) {
		return in.Mountpoint != m.Target, false
	})
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	if len(infos) == 0 {
		return fmt.Errorf("%w: nothing mounted on %q", ErrMismatch, m.Target)
	}
	top := infos[0]
	for _, in := range infos[1:] {
		if in.Parent == top.ID {
			top = in
		}
	}
	return m.Match(top, used)
}

// paramDir holds the overlay module's parameters: the defaults for options
// that the mount table leaves out.
var paramDir = "/sys/module/overlay/parameters"

// Match checks one mount-table entry against the description: an overlay on
// m.Target whose only lower layer is m.Lower, with m.Upper and m.Work, whose
// super options hold each of used with its value (the kernel leaves out
// options equal to the module's current default, which is then read from the
// module's parameters), no volatile, userxattr exactly when Unprivileged, and
// no other option.
func (m Mount) Match(info *mountinfo.Info, used []string) error {
	return m.match(info, used, moduleDefaults(), sameFS(m.Lower, m.Upper))
}

func (m Mount) match(info *mountinfo.Info, used []string, defaults map[string]string, sameFS bool) error {
	var problems []string
	bad := func(format string, a ...any) {
		problems = append(problems, fmt.Sprintf(format, a...))
	}
	if info.FSType != "overlay" {
		return fmt.Errorf("%w: mount %d on %q: filesystem type %q, not overlay", ErrMismatch, info.ID, m.Target, info.FSType)
	}
	if info.Mountpoint != m.Target {
		bad("mounted on %q", info.Mountpoint)
	}
	shown := map[string]string{}
	for _, o := range strings.Split(info.VFSOptions, ",") {
		k, v, _ := strings.Cut(unescapeOctal(o), "=")
		shown[k] = v
	}
	want := map[string]string{}
	for _, o := range used {
		k, v, _ := strings.Cut(o, "=")
		want[k] = v
	}
	for _, k := range slices.Sorted(maps.Keys(shown)) {
		v := shown[k]
		switch k {
		case "rw":
		case "lowerdir":
			if l := splitLower(v); len(l) != 1 || l[0] != m.Lower {
				bad("lowerdir %q, want %q", l, m.Lower)
			}
		case "upperdir", "workdir":
			p := map[string]string{"upperdir": m.Upper, "workdir": m.Work}[k]
			if unescapeOverlay(v) != p {
				bad("%s %q, want %q", k, unescapeOverlay(v), p)
			}
		case "volatile", "fsync":
			if k == "volatile" || v == "volatile" {
				bad("option %q: volatile overlays are not allowed", strings.TrimSuffix(k+"="+v, "="))
			} else {
				bad("option %q not asked for", k+"="+v)
			}
		case "userxattr":
			if !m.Unprivileged {
				bad("option %q on a privileged mount", k)
			}
		default:
			if w, ok := want[k]; !ok {
				bad("option %q not asked for", strings.TrimSuffix(k+"="+v, "="))
			} else if v != w {
				bad("option %q, want %q", k+"="+v, k+"="+w)
			}
		}
	}
	for _, k := range []string{"lowerdir", "upperdir", "workdir"} {
		if _, ok := shown[k]; !ok {
			bad("option %q missing", k)
		}
	}
	if _, ok := shown["userxattr"]; m.Unprivileged && !ok {
		bad("option %q missing", "userxattr")
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		w := want[k]
		if k == "userxattr" {
			continue
		}
		if _, ok := shown[k]; ok {
			continue
		}
		d, ok := defaults[k]
		switch {
		case !ok:
			bad("option %q not shown and the module default is unknown", k+"="+w)
		case k == "xino" && sameFS:
			// xino has no effect, and is not shown, when all layers share one filesystem.
		case m.Unprivileged && (k == "redirect_dir" && w == "nofollow" || k == "metacopy" && w == "off"):
			// userxattr forces these values.
		case d != w:
			bad("option %q not shown, so the module default %q applies", k+"="+w, k+"="+d)
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: mount %d on %q: %s", ErrMismatch, info.ID, m.Target, strings.Join(problems, "; "))
	}
	return nil
}

// moduleDefaults reads the overlay module's current defaults for the options
// the mount table may leave out.
func moduleDefaults() map[string]string {
	p := map[string]bool{}
	for _, n := range []string{"redirect_dir", "redirect_always_follow", "index", "metacopy", "nfs_export", "xino_auto"} {
		b, err := os.ReadFile(filepath.Join(paramDir, n))
		if err != nil {
			continue
		}
		p[n] = bytes.HasPrefix(b, []byte("Y"))
		if !bytes.HasPrefix(b, []byte("Y")) && !bytes.HasPrefix(b, []byte("N")) {
			delete(p, n)
		}
	}
	d := map[string]string{"uuid": "auto"}
	onoff := map[bool]string{true: "on", false: "off"}
	for _, n := range []string{"index", "metacopy", "nfs_export"} {
		if v, ok := p[n]; ok {
			d[n] = onoff[v]
		}
	}
	if v, ok := p["xino_auto"]; ok {
		d["xino"] = map[bool]string{true: "auto", false: "off"}[v]
	}
	rd, ok1 := p["redirect_dir"]
	rf, ok2 := p["redirect_always_follow"]
	switch {
	case ok1 && rd:
		d["redirect_dir"] = "on"
	case ok1 && ok2 && rf:
		d["redirect_dir"] = "follow"
	case ok1 && ok2:
		d["redirect_dir"] = "nofollow"
	}
	return d
}

func sameFS(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// unescapeOctal undoes the mount table's \ooo escapes.
func unescapeOctal(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// unescapeOverlay undoes overlay's backslash escapes.
func unescapeOverlay(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// splitLower splits a lowerdir value into unescaped layer paths.
func splitLower(s string) []string {
	var layers []string
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case s[i] == ':':
			layers = append(layers, b.String())
			b.Reset()
		default:
			b.WriteByte(s[i])
		}
	}
	return append(layers, b.String())
}
