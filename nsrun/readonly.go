package nsrun

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// The views.
const (
	// ViewMinimal is a root built for the agent: the host's programs and
	// libraries read-only, the workspace, private scratch space and what
	// the caller names (see describeMinimal).
	ViewMinimal = "minimal"
	// ViewHost is the host's whole filesystem, read-only but for the
	// workspace, private scratch space and the writable paths (see
	// describeView).
	ViewHost = "host"
)

// ErrReadOnlyPath is wrapped by the errors of CheckReadOnly.
var ErrReadOnlyPath = errors.New("read-only path (--ro)")

// CheckReadOnly checks the host paths the agent may read besides its view
// (--ro) before anything starts, and returns them with symlinks resolved.
// Each must exist; none may be the root directory (that is the host view),
// the workspace or lie inside it (the agent sees it through the overlay),
// overlap one of reserved (layerseal's own paths, each mapped to what it
// is), either way, nor lie under /proc, /sys or /dev. A path that holds the
// workspace is allowed: the workspace's overlay is bound over it.
func CheckReadOnly(paths []string, workspace string, reserved map[string]string) ([]string, error) {
	return checkHostPaths(paths, workspace, reserved, false)
}

// checkHostPaths is CheckWritable (writable) or CheckReadOnly.
func checkHostPaths(paths []string, workspace string, reserved map[string]string, writable bool) ([]string, error) {
	kind := ErrReadOnlyPath
	if writable {
		kind = ErrWritable
	}
	var out []string
	for _, p := range paths {
		if p == "" || strings.IndexByte(p, 0) >= 0 {
			return nil, fmt.Errorf("%w: %q is not a path", kind, p)
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %q does not exist: create it first, or leave it out", kind, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", kind, p, err)
		}
		if !filepath.IsAbs(real) {
			return nil, fmt.Errorf("%w: %q is not an absolute path", kind, p)
		}
		if real == "/" {
			if writable {
				return nil, fmt.Errorf("%w: %q is the root directory: the whole host cannot be writable", kind, p)
			}
			return nil, fmt.Errorf("%w: %q is the root directory: to show the agent the whole host, use the host view (--view host)", kind, p)
		}
		if real == workspace {
			return nil, fmt.Errorf("%w: %q is the workspace, which the agent sees through the overlay already", kind, p)
		}
		if attest.Within(real, workspace) {
			return nil, fmt.Errorf("%w: %q lies inside the workspace %q, which the agent sees through the overlay already",
				kind, p, workspace)
		}
		if writable && attest.Within(workspace, real) {
			return nil, fmt.Errorf("%w: %q holds the workspace %q: the agent could move the workspace on the host",
				kind, p, workspace)
		}
		for _, r := range slices.Sorted(maps.Keys(reserved)) {
			if attest.Within(real, r) || attest.Within(r, real) {
				return nil, fmt.Errorf("%w: %q overlaps layerseal's %s %q, which the agent must not reach",
					kind, p, reserved[r], r)
			}
		}
		for _, fresh := range []string{"/proc", "/sys", "/dev"} {
			if attest.Within(real, fresh) {
				return nil, fmt.Errorf("%w: %q lies under %s, which the agent gets a fresh one of", kind, p, fresh)
			}
		}
		out = append(out, real)
	}
	return out, nil
}

// validateView checks s's view and read-only paths.
func (s Sandbox) validateView() error {
	if v := s.View; v != "" && v != ViewMinimal && v != ViewHost {
		return fmt.Errorf("view %q: want %q or %q", v, ViewMinimal, ViewHost)
	}
	for _, p := range s.ReadOnly {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
			return fmt.Errorf("read-only path %q: not an absolute, clean path", p)
		}
		if p == "/" {
			return fmt.Errorf("read-only path %q: the whole host is the host view (--view host)", p)
		}
	}
	return nil
}
