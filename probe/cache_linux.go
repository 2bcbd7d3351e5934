//go:build linux

package probe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// CacheFile is the name of the file, in root's state dir, where
// DetectCached keeps the overlay findings for the rest of the boot.
const CacheFile = "kernel-features.json"

// cacheFormat tags the cache file; a file with another tag is ignored.
// Change it whenever the trials or what they record change.
const cacheFormat = "layerseal-kernel-features/1"

// bootIDFile names the current boot: a random UUID the kernel makes at boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// maxCacheSize bounds what is read of a cache file.
const maxCacheSize = 64 << 10

// cache is the content of a cache file: the overlay findings of the trial
// mounts and the key they are valid under. Every member is required, none
// may be added: the file is read strictly (see decodeCache).
type cache struct {
	Format string `json:"format"`
	// The key: the boot, the kernel release, and the overlay module's
	// parameters (and the note on reading them) as read after the trial
	// mounts: they set the defaults the trials ran under, and some can be
	// changed at run time.
	BootID            string            `json:"boot_id"`
	KernelRelease     string            `json:"kernel_release"`
	OverlayParams     map[string]string `json:"overlay_params"`
	OverlayParamsNote string            `json:"overlay_params_note"`
	// The findings.
	Overlay        Finding         `json:"overlay"`
	OverlayOptions []OptionFinding `json:"overlay_options"`
	OverlayPinned  Finding         `json:"overlay_pinned"`
	UserXattr      Finding         `json:"userxattr"`
}

// DetectCached is Detect, with the trial mounts done once per boot. Run as
// root, it keeps what the overlay trial mounts found in the file path
// (normally CacheFile in root's state dir) and reuses it while the boot id
// (/proc/sys/kernel/random/boot_id), the kernel release and the overlay
// module's parameters are those the file was written under. The other items
// (statx, openat2, the release itself, the module parameters) are tried at
// every call, so a process whose statx is refused finds that out even when
// the cache was written by one whose statx worked.
//
// The file is used only when it is a regular file owned by root with mode
// 0600, at most 64 KiB, that decodes strictly and holds a finding for each
// of PinnedOverlayOptions; otherwise, or when its key differs, the trial
// mounts are made and the file is replaced. It is written only into a
// directory that exists, is owned by root and is writable by no one else; a
// failure to write it is not an error (the next call probes again). Without
// root it is neither read nor written and DetectCached is Detect.
func DetectCached(path string) (Features, error) {
	sims, err := ParseSimulate(os.Getenv(SimulateEnv))
	if err != nil {
		return Features{}, err
	}
	if os.Geteuid() != 0 {
		return detect(false).Without(sims...)
	}
	f, _ := detectCached(path, bootID(), trialOverlayItems)
	return f.Without(sims...)
}

// detectCached is DetectCached's work with the boot id and the trial
// mounts given; it also reports whether the cache was used. An empty boot
// id means the boot cannot be named: the cache is then neither read nor
// written.
func detectCached(path, boot string, trial func(*Features)) (Features, bool) {
	f := detectCheap()
	params, note := overlayParams()
	if boot != "" {
		if c, err := readCache(path); err == nil && c.BootID == boot && c.KernelRelease == f.KernelRelease && maps.Equal(c.OverlayParams, params) && c.OverlayParamsNote == note {
			f.Overlay, f.OverlayOptions, f.OverlayPinned, f.UserXattr = c.Overlay, c.OverlayOptions, c.OverlayPinned, c.UserXattr
			f.OverlayParams, f.OverlayParamsNote = params, note
			return f, true
		}
	}
	trial(&f)
	// Read after the trial mounts, which may have loaded the module.
	f.OverlayParams, f.OverlayParamsNote = overlayParams()
	if boot != "" && cacheable(f) {
		_ = writeCache(path, cache{
			Format:            cacheFormat,
			BootID:            boot,
			KernelRelease:     f.KernelRelease,
			OverlayParams:     f.OverlayParams,
			OverlayParamsNote: f.OverlayParamsNote,
			Overlay:           f.Overlay,
			OverlayOptions:    f.OverlayOptions,
			OverlayPinned:     f.OverlayPinned,
			UserXattr:         f.UserXattr,
		})
	}
	return f, false
}

// bootID returns the current boot's id, or "" when it cannot be read or is
// not the 36-character UUID the kernel writes.
func bootID() string {
	b, err := os.ReadFile(bootIDFile)
	if err != nil {
		return ""
	}
	id := strings.TrimSuffix(string(b), "\n")
	if len(id) != 36 || strings.Trim(id, "0123456789abcdef-") != "" {
		return ""
	}
	return id
}

// cacheable reports whether f's overlay findings are worth keeping: every
// one was tried (an Unknown says the trial itself failed, which may not
// last) and the options are PinnedOverlayOptions.
func cacheable(f Features) bool {
	all := []Finding{f.Overlay, f.OverlayPinned, f.UserXattr}
	for _, o := range f.OverlayOptions {
		all = append(all, o.Finding)
	}
	for _, fd := range all {
		if fd.Status == Unknown {
			return false
		}
	}
	return sameOptions(f.OverlayOptions)
}

// sameOptions reports whether opts has one finding per entry of
// PinnedOverlayOptions, in that order.
func sameOptions(opts []OptionFinding) bool {
	return slices.EqualFunc(opts, PinnedOverlayOptions, func(o OptionFinding, p string) bool { return o.Option == p })
}

// errCacheRefused is wrapped by every reason readCache refuses a file.
var errCacheRefused = errors.New("kernel feature cache refused")

// readCache reads the cache file at path, refusing one that is not a
// regular file owned by root with mode 0600, is larger than maxCacheSize,
// or does not decode strictly.
func readCache(path string) (cache, error) {
	// O_NONBLOCK: a FIFO planted there must not block the open.
	file, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return cache{}, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return cache{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return cache{}, fmt.Errorf("%w: %q is not a regular file", errCacheRefused, path)
	case !ok || st.Uid != 0:
		return cache{}, fmt.Errorf("%w: %q is not owned by root", errCacheRefused, path)
	case st.Mode&0o7777 != 0o600:
		return cache{}, fmt.Errorf("%w: %q has mode %04o, want 0600", errCacheRefused, path, st.Mode&0o7777)
	case fi.Size() > maxCacheSize:
		return cache{}, fmt.Errorf("%w: %q is larger than %d bytes", errCacheRefused, path, maxCacheSize)
	}
	b, err := io.ReadAll(io.LimitReader(file, maxCacheSize+1))
	if err != nil {
		return cache{}, err
	}
	return decodeCache(b)
}

// decodeCache decodes b strictly: b must be exactly the encoding
// encodeCache gives of what it decodes to (so no unknown, duplicate,
// case-variant or missing member, no other spacing, no trailing data), with
// the current format tag and one finding per PinnedOverlayOptions entry.
func decodeCache(b []byte) (cache, error) {
	if len(b) > maxCacheSize {
		return cache{}, fmt.Errorf("%w: larger than %d bytes", errCacheRefused, maxCacheSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c cache
	if err := dec.Decode(&c); err != nil {
		return cache{}, fmt.Errorf("%w: %w", errCacheRefused, err)
	}
	if again, err := encodeCache(c); err != nil || !bytes.Equal(again, b) {
		return cache{}, fmt.Errorf("%w: not in its one valid encoding", errCacheRefused)
	}
	if c.Format != cacheFormat {
		return cache{}, fmt.Errorf("%w: format %q, want %q", errCacheRefused, c.Format, cacheFormat)
	}
	if !sameOptions(c.OverlayOptions) {
		return cache{}, fmt.Errorf("%w: its overlay options are not the pinned ones", errCacheRefused)
	}
	return c, nil
}

// encodeCache is the one valid encoding of c: compact JSON (map keys
// sorted, as encoding/json writes them) and a final newline.
func encodeCache(c cache) ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// writeCache replaces the file at path with c, through a temporary file
// renamed over it, so a reader sees the old file or the new one. It writes
// only into a directory owned by root that no one else can write.
func writeCache(path string, c cache) error {
	b, err := encodeCache(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return fmt.Errorf("directory %q is not root's alone: not caching the kernel's features there", dir)
	}
	tmp, err := os.CreateTemp(dir, "."+CacheFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 less the umask: set it exactly.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
