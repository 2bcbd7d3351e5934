package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kernel is one Debian kernel package to boot, or a kernel image of one's
// own (Image set; Package nil).
type Kernel struct {
	Series  string         // short name used in the matrix: "5.10"
	Suite   string         // Debian suite that carries it
	Package *regexp.Regexp // package name; the newest match is used
	// Image is the path of a kernel image (bzImage) to boot instead, and
	// Modules the directory of its modules (lib/modules/RELEASE), or ""
	// when what the guest needs is built in.
	Image, Modules string
}

// Kernels are the kernels the matrix boots by default, oldest first.
var Kernels = []Kernel{
	{Series: "5.10", Suite: "bullseye-security", Package: regexp.MustCompile(`^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$`)},
	{Series: "6.1", Suite: "bookworm", Package: regexp.MustCompile(`^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$`)},
	{Series: "6.12", Suite: "bookworm-security", Package: regexp.MustCompile(`^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$`)},
}

// sources is the private apt source list: the system's own is never
// touched.
const sources = `deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
`

// apt runs apt-get or apt-cache against the private configuration in
// cache/apt.
type apt struct{ dir string }

func newApt(cache string) (*apt, error) {
	a := &apt{dir: filepath.Join(cache, "apt")}
	for _, d := range []string{"lists/partial", "archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(sources), 0o644); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *apt) opts() []string {
	return []string{
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(a.dir, "sources.list"),
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(a.dir, "lists"),
		"-o", "Dir::Cache=" + a.dir,
		"-o", "Dir::State::status=/dev/null",
		"-o", "APT::Architectures=amd64",
		// apt's download sandbox user cannot write to a root-owned cache.
		"-o", "APT::Sandbox::User=root",
	}
}

func (a *apt) run(dir, tool string, args ...string) ([]byte, error) {
	cmd := exec.Command(tool, append(a.opts(), args...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// update refreshes the private package lists once a day at most.
func (a *apt) update() error {
	stamp := filepath.Join(a.dir, "updated")
	if fi, err := os.Stat(stamp); err == nil && time.Since(fi.ModTime()) < 24*time.Hour {
		return nil
	}
	if _, err := a.run(a.dir, "apt-get", "-qq", "update"); err != nil {
		return err
	}
	return os.WriteFile(stamp, nil, 0o644)
}

// newest returns the newest package name matching re, by version order of
// the names.
func (a *apt) newest(re *regexp.Regexp) (string, error) {
	out, err := a.run(a.dir, "apt-cache", "pkgnames")
	if err != nil {
		return "", err
	}
	var names []string
	for n := range strings.FieldsSeq(string(out)) {
		if re.MatchString(n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no package matches %q", re)
	}
	slices.SortFunc(names, compareVersions)
	return names[len(names)-1], nil
}

// compareVersions orders strings by their runs of digits as numbers.
func compareVersions(a, b string) int {
	num := regexp.MustCompile(`[0-9]+|[^0-9]+`)
	x, y := num.FindAllString(a, -1), num.FindAllString(b, -1)
	for i := 0; i < len(x) && i < len(y); i++ {
		nx, ex := strconv.Atoi(x[i])
		ny, ey := strconv.Atoi(y[i])
		if ex == nil && ey == nil && nx != ny {
			if nx < ny {
				return -1
			}
			return 1
		}
		if c := strings.Compare(x[i], y[i]); (ex != nil || ey != nil) && c != 0 {
			return c
		}
	}
	return len(x) - len(y)
}

// download returns the .deb of the newest package matching re in
// cache/debs, fetching it with apt-get download unless a matching .deb is
// already cached (so a warm cache works offline).
func (a *apt) download(cache string, re *regexp.Regexp) (string, error) {
	debs := filepath.Join(cache, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return "", err
	}
	if p := cachedDeb(debs, re); p != "" {
		return p, nil
	}
	if err := a.update(); err != nil {
		return "", err
	}
	name, err := a.newest(re)
	if err != nil {
		return "", err
	}
	if _, err := a.run(debs, "apt-get", "-qq", "download", name); err != nil {
		return "", err
	}
	if p := cachedDeb(debs, re); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("apt-get download %s left no .deb in %q", name, debs)
}

// cachedDeb returns the newest .deb in dir whose package name matches re.
func cachedDeb(dir string, re *regexp.Regexp) string {
	ents, _ := os.ReadDir(dir)
	var found []string
	for _, e := range ents {
		pkg, _, ok := strings.Cut(e.Name(), "_")
		if ok && strings.HasSuffix(e.Name(), ".deb") && re.MatchString(pkg) {
			found = append(found, e.Name())
		}
	}
	if len(found) == 0 {
		return ""
	}
	slices.SortFunc(found, compareVersions)
	return filepath.Join(dir, found[len(found)-1])
}

// Extracted is a kernel image and the modules the guest loads, in load
// order (dependencies first), decompressed.
type Extracted struct {
	Release string
	Vmlinuz string
	Modules []string
}

// guestModules are the modules the guest needs: overlay, and a virtio disk
// with ext4 for /tmp (tmpfs has user xattrs only since Linux 6.6); ext4
// also wants the crc32c driver. A module the package lacks is taken to be
// built in, except overlay.
var guestModules = []string{"overlay", "virtio_pci", "virtio_blk", "crc32c_generic", "ext4"}

// extract unpacks the kernel image and the modules it needs from deb into
// dir (once; the result is reused).
func extract(deb, dir string) (Extracted, error) {
	root := filepath.Join(dir, "root")
	done := filepath.Join(dir, "extracted")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(dir)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return Extracted{}, err
		}
		cmd := exec.Command("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" --wildcards './boot/vmlinuz-*' './lib/modules/*/kernel/*' './usr/lib/modules/*/kernel/*' 2>/dev/null; ls "$2"/boot/vmlinuz-* >/dev/null`, "sh", deb, root)
		if out, err := cmd.CombinedOutput(); err != nil {
			return Extracted{}, fmt.Errorf("extract %q: %w: %s", deb, err, out)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return Extracted{}, err
		}
	}
	vm, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	if len(vm) != 1 {
		return Extracted{}, fmt.Errorf("%q: want one vmlinuz, found %d", deb, len(vm))
	}
	x := Extracted{Vmlinuz: vm[0], Release: strings.TrimPrefix(filepath.Base(vm[0]), "vmlinuz-")}
	return withModules(x, deb, dir, true, filepath.Join(root, "lib", "modules"), filepath.Join(root, "usr", "lib", "modules"))
}

// withModules adds to x the guestModules found under the module trees
// bases, with what they depend on, decompressed into dir/modules; those
// not found are taken to be built in, but for overlay when needOverlay.
// from names the kernel in errors.
func withModules(x Extracted, from, dir string, needOverlay bool, bases ...string) (Extracted, error) {
	index := map[string]string{}
	for _, base := range bases {
		filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if n, ok := moduleName(d.Name()); ok {
					index[n] = p
				}
			}
			return nil
		})
	}
	seen := map[string]bool{}
	var visit func(name string) error
	visit = func(name string) error {
		name = strings.ReplaceAll(name, "-", "_")
		if seen[name] {
			return nil
		}
		seen[name] = true
		src, ok := index[name]
		if !ok {
			// Built into this kernel.
			return nil
		}
		ko, err := decompress(src, filepath.Join(dir, "modules", name+".ko"))
		if err != nil {
			return err
		}
		deps, err := moduleDepends(ko)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		x.Modules = append(x.Modules, ko)
		return nil
	}
	for _, m := range guestModules {
		if _, ok := index[m]; !ok && m == "overlay" && needOverlay {
			return Extracted{}, fmt.Errorf("%q holds no overlay module", from)
		}
		if err := visit(m); err != nil {
			return Extracted{}, err
		}
	}
	return x, nil
}

// moduleName returns the module name of a file name like "virtio-blk.ko.xz".
func moduleName(file string) (string, bool) {
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if n, ok := strings.CutSuffix(file, ext); ok {
			return strings.ReplaceAll(n, "-", "_"), true
		}
	}
	return "", false
}

// decompress writes the module src to dst as a plain .ko.
func decompress(src, dst string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(src, ".xz"):
		cmd = exec.Command("xz", "-dc", src)
	case strings.HasSuffix(src, ".zst"):
		cmd = exec.Command("zstd", "-qdc", src)
	case strings.HasSuffix(src, ".gz"):
		cmd = exec.Command("gzip", "-dc", src)
	default:
		b, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		return dst, os.WriteFile(dst, b, 0o644)
	}
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("decompress %q: %w", src, err)
	}
	return dst, os.WriteFile(dst, b, 0o644)
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(ko string) ([]string, error) {
	f, err := elf.Open(ko)
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", ko, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("module %q: no .modinfo section", ko)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("module %q: %w", ko, err)
	}
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			if len(v) == 0 {
				return nil, nil
			}
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

var errNoBusybox = errors.New("no busybox in the busybox-static package")

// busybox returns a static busybox from Debian's busybox-static package.
func busybox(a *apt, cache string) (string, error) {
	deb, err := a.download(cache, regexp.MustCompile(`^busybox-static$`))
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "busybox")
	bb := filepath.Join(dir, "bin", "busybox")
	if _, err := os.Stat(bb); err == nil {
		return bb, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" ./bin/busybox`, "sh", deb, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("extract %q: %w: %s", deb, err, out)
	}
	if _, err := os.Stat(bb); err != nil {
		return "", errNoBusybox
	}
	return bb, nil
}

// ownKernel is the kernel image at image, with its modules under modules
// (lib/modules/RELEASE; "" when overlay, virtio and ext4 are built in),
// their copies kept in dir.
func ownKernel(image, modules, dir string) (Extracted, error) {
	release, err := imageRelease(image)
	if err != nil {
		return Extracted{}, err
	}
	x := Extracted{Vmlinuz: image, Release: release}
	if modules == "" {
		return x, nil
	}
	if fi, err := os.Stat(modules); err != nil || !fi.IsDir() {
		return Extracted{}, fmt.Errorf("-modules %q: not a directory of modules (lib/modules/%s)", modules, release)
	}
	if err := os.RemoveAll(filepath.Join(dir, "modules")); err != nil {
		return Extracted{}, err
	}
	return withModules(x, modules, dir, false, modules)
}

// imageRelease reads the kernel release a bzImage carries: its x86 boot
// setup header ("HdrS" at 0x202) points at the version string at
// 0x200 + the 16-bit value at 0x20E, whose first word is the release.
func imageRelease(image string) (string, error) {
	f, err := os.Open(image)
	if err != nil {
		return "", fmt.Errorf("-kernel: %w", err)
	}
	defer f.Close()
	var head [0x8000]byte
	n, _ := io.ReadFull(f, head[:])
	b := head[:n]
	if len(b) < 0x210 || string(b[0x202:0x206]) != "HdrS" {
		return "", fmt.Errorf("-kernel %q: not an x86 kernel image (bzImage): no boot setup header", image)
	}
	at := 0x200 + (int(b[0x20E]) | int(b[0x20F])<<8)
	if at >= len(b) {
		return "", fmt.Errorf("-kernel %q: its version string lies beyond the setup header", image)
	}
	version := b[at:]
	if i := bytes.IndexByte(version, 0); i >= 0 {
		version = version[:i]
	}
	fields := strings.Fields(string(version))
	if len(fields) == 0 {
		return "", fmt.Errorf("-kernel %q: an empty version string", image)
	}
	return fields[0], nil
}
