//go:build linux

package probe

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/layerseal/layerseal/internal/privtest"
	"golang.org/x/sys/unix"
)

// fakeTrial stands in for the trial mounts: it sets every overlay item to a
// finding no cache below holds, and counts its calls.
func fakeTrial(calls *int) func(*Features) {
	return func(f *Features) {
		*calls++
		tried := Finding{Status: Yes, Detail: "fake trial"}
		setMountItemsFor(f, PinnedOverlayOptions, tried)
		f.Overlay = tried
	}
}

// forged is a cache under the current key (boot id boot) whose findings
// differ from both the kernel's and fakeTrial's.
func forged(t *testing.T, boot string) cache {
	t.Helper()
	params, note := overlayParams()
	no := Finding{Status: No, Detail: "forged"}
	c := cache{
		Format:            cacheFormat,
		BootID:            boot,
		KernelRelease:     kernelRelease(),
		OverlayParams:     params,
		OverlayParamsNote: note,
		Overlay:           no,
		OverlayPinned:     no,
		UserXattr:         no,
	}
	for _, o := range PinnedOverlayOptions {
		c.OverlayOptions = append(c.OverlayOptions, OptionFinding{Option: o, Finding: no})
	}
	return c
}

func encoded(t *testing.T, c cache) []byte {
	t.Helper()
	b, err := encodeCache(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBootID checks that the boot can be named here (else the cache is
// never used) and that the name is stable.
func TestBootID(t *testing.T) {
	a, b := bootID(), bootID()
	if a == "" || a != b {
		t.Fatalf("boot ids %q, %q: want one 36-character id", a, b)
	}
}

// TestDetectCachedWritesThenReuses checks the first call probes and writes a
// root-owned 0600 cache, and the second uses it without probing.
func TestDetectCachedWritesThenReuses(t *testing.T) {
	privtest.Require(t)
	path := filepath.Join(t.TempDir(), CacheFile)
	calls := 0
	first, hit := detectCached(path, bootID(), fakeTrial(&calls))
	if hit || calls != 1 {
		t.Fatalf("first call: hit %v, %d trials; want a miss and one trial", hit, calls)
	}
	checkCacheFile(t, path, first)
	second, hit := detectCached(path, bootID(), fakeTrial(&calls))
	if !hit || calls != 1 {
		t.Fatalf("second call: hit %v, %d trials; want a hit and no new trial", hit, calls)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("from the cache:\n%+v\nwant what the trial found:\n%+v", second, first)
	}
}

// checkCacheFile checks that path is root's, mode 0600, and holds the
// current key and the overlay findings of want.
func checkCacheFile(t *testing.T, path string, want Features) {
	t.Helper()
	c, err := readCache(path)
	if err != nil {
		t.Fatalf("cache file not rewritten: %v", err)
	}
	if c.BootID != bootID() || c.KernelRelease != kernelRelease() {
		t.Errorf("cache key %q %q, want %q %q", c.BootID, c.KernelRelease, bootID(), kernelRelease())
	}
	if c.Overlay != want.Overlay || c.OverlayPinned != want.OverlayPinned || c.UserXattr != want.UserXattr || !reflect.DeepEqual(c.OverlayOptions, want.OverlayOptions) {
		t.Errorf("cache holds %+v, want the findings of %+v", c, want)
	}
}

// TestDetectCachedRefusesBadCache plants, for each way a cache can be
// stale, forged or malformed, a file whose findings differ from the
// kernel's; DetectCached must ignore it (probe, and report what the probe
// found, not the file) and replace it. The first case is the control: the
// same forged findings under the current key, root's and 0600, are used.
func TestDetectCachedRefusesBadCache(t *testing.T) {
	privtest.Require(t)
	boot := bootID()
	valid := func(t *testing.T, path string) { write(t, path, encoded(t, forged(t, boot)), 0o600) }
	// edited plants the forged cache changed by edit, root's and 0600.
	edited := func(edit func(c *cache)) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			c := forged(t, boot)
			edit(&c)
			write(t, path, encoded(t, c), 0o600)
		}
	}
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path string)
	}{
		{"valid (control: used)", valid},
		{"other boot id", edited(func(c *cache) { c.BootID = "00000000-0000-4000-8000-000000000000" })},
		{"other kernel release", edited(func(c *cache) { c.KernelRelease += "-other" })},
		{"other overlay parameters", edited(func(c *cache) { c.OverlayParams = map[string]string{"metacopy": "Y"} })},
		{"not owned by root", func(t *testing.T, path string) {
			valid(t, path)
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"mode 0644", func(t *testing.T, path string) {
			valid(t, path)
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"mode 0400", func(t *testing.T, path string) {
			valid(t, path)
			if err := os.Chmod(path, 0o400); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to a valid cache", func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			valid(t, target)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"fifo", func(t *testing.T, path string) {
			if err := unix.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"statx member added", func(t *testing.T, path string) {
			b := encoded(t, forged(t, boot))
			b = bytes.Replace(b, []byte(`{"format"`), []byte(`{"statx_mnt_id":{"status":"yes","detail":"forged"},"format"`), 1)
			write(t, path, b, 0o600)
		}},
		{"duplicate member", func(t *testing.T, path string) {
			b := encoded(t, forged(t, boot))
			b = bytes.Replace(b, []byte(`{"format"`), []byte(`{"userxattr":{"status":"yes","detail":"x"},"format"`), 1)
			write(t, path, b, 0o600)
		}},
		{"member missing", func(t *testing.T, path string) {
			b := encoded(t, forged(t, boot))
			i := bytes.Index(b, []byte(`,"userxattr"`))
			write(t, path, append(b[:i:i], '}', '\n'), 0o600)
		}},
		{"case-variant member", func(t *testing.T, path string) {
			b := bytes.Replace(encoded(t, forged(t, boot)), []byte(`"boot_id"`), []byte(`"Boot_ID"`), 1)
			write(t, path, b, 0o600)
		}},
		{"indented", func(t *testing.T, path string) {
			b, err := json.MarshalIndent(forged(t, boot), "", " ")
			if err != nil {
				t.Fatal(err)
			}
			write(t, path, append(b, '\n'), 0o600)
		}},
		{"trailing data", func(t *testing.T, path string) {
			write(t, path, append(encoded(t, forged(t, boot)), "{}\n"...), 0o600)
		}},
		{"other format", edited(func(c *cache) { c.Format = "layerseal-kernel-features/0" })},
		{"an option dropped", edited(func(c *cache) { c.OverlayOptions = c.OverlayOptions[1:] })},
		{"bad status", func(t *testing.T, path string) {
			b := bytes.Replace(encoded(t, forged(t, boot)), []byte(`"status":"no"`), []byte(`"status":"maybe"`), 1)
			write(t, path, b, 0o600)
		}},
		{"too large", func(t *testing.T, path string) {
			write(t, path, bytes.Repeat([]byte(" "), maxCacheSize+1), 0o600)
		}},
		{"empty", func(t *testing.T, path string) { write(t, path, nil, 0o600) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), CacheFile)
			tc.plant(t, path)
			calls := 0
			f, hit := detectCached(path, boot, fakeTrial(&calls))
			if tc.name == "valid (control: used)" {
				want := forged(t, boot)
				if !hit || calls != 0 || f.Overlay != want.Overlay || !reflect.DeepEqual(f.OverlayOptions, want.OverlayOptions) {
					t.Fatalf("a valid cache under the current key was not used: hit %v, %d trials, %+v", hit, calls, f)
				}
				return
			}
			if hit || calls != 1 {
				t.Fatalf("hit %v, %d trials: the cache was not ignored", hit, calls)
			}
			fresh := Features{}
			fakeTrial(new(int))(&fresh)
			if f.Overlay != fresh.Overlay || f.OverlayPinned != fresh.OverlayPinned || f.UserXattr != fresh.UserXattr || !reflect.DeepEqual(f.OverlayOptions, fresh.OverlayOptions) {
				t.Errorf("findings %+v: want the trial's, not the planted cache's", f)
			}
			checkCacheFile(t, path, f)
			if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
				t.Errorf("rewritten cache: %v, %v; want a regular file of root's with mode 0600", fi, err)
			}
		})
	}
}

// TestDetectCachedSameAsDetect runs the real trial mounts: whether the
// overlay findings come from a fresh probe, the cache this wrote, or a
// forged cache under another boot id, DetectCached reports exactly what
// Detect does, which is what the launch record keeps.
func TestDetectCachedSameAsDetect(t *testing.T) {
	privtest.Require(t)
	scratch(t)
	want, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), CacheFile)
	c := forged(t, "00000000-0000-4000-8000-000000000000")
	write(t, path, encoded(t, c), 0o600)
	for _, round := range []string{"over a stale forged cache", "with no cache", "from its own cache"} {
		if round == "with no cache" {
			os.Remove(path)
		}
		got, err := DetectCached(path)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: DetectCached = %+v\nDetect = %+v", round, got, want)
		}
	}
	if _, err := readCache(path); err != nil {
		t.Errorf("no cache written: %v", err)
	}
}

// write makes path hold b with mode perm exactly.
func write(t *testing.T, path string, b []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
}
