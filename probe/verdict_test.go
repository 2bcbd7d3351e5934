package probe

import (
	"strings"
	"testing"
)

// allYes is a kernel that offers everything.
func allYes() Features {
	y := Finding{Status: Yes, Detail: "trial"}
	f := Features{KernelRelease: "test", StatxMountID: y, StatxMountIDUnique: y, Openat2: y, LandlockScope: y, Seccomp: y,
		Overlay: y, OverlayPinned: y, UserXattr: y}
	for _, o := range PinnedOverlayOptions {
		f.OverlayOptions = append(f.OverlayOptions, OptionFinding{Option: o, Finding: y})
	}
	return f
}

// TestVerdict: each missing feature moves the verdict as docs/KERNELS.md
// says: a refusal, an incomplete reason, or a note.
func TestVerdict(t *testing.T) {
	if v := allYes().Verdict(); !v.Runs || len(v.Incomplete)+len(v.Notes)+len(v.Refusals) != 0 ||
		v.Lines()[0] != "layerseal runs here, and its statements can be complete" {
		t.Errorf("a kernel with everything: %+v", v)
	}
	no := Finding{Status: No, Detail: "EINVAL"}
	for _, tc := range []struct {
		name string
		drop func(*Features)
		runs bool
		in   func(Verdict) []string
		says string
	}{
		{"overlay", func(f *Features) { f.Overlay = no }, false, func(v Verdict) []string { return v.Refusals }, "no overlay"},
		{"overlay unknown", func(f *Features) { f.Overlay = Finding{Status: Unknown, Detail: "needs root"} }, false,
			func(v Verdict) []string { return v.Refusals }, "as root"},
		{"metacopy", func(f *Features) { f.OverlayOptions[1].Finding = no }, false, func(v Verdict) []string { return v.Refusals }, "metacopy=off"},
		{"uuid", func(f *Features) { f.OverlayOptions[5].Finding = no }, true, func(v Verdict) []string { return v.Notes }, "uuid=null"},
		{"statx", func(f *Features) { f.StatxMountID = no }, true, func(v Verdict) []string { return v.Incomplete }, "no-mount-id"},
		{"seccomp", func(f *Features) { f.Seccomp = no }, true, func(v Verdict) []string { return v.Incomplete }, "seccomp"},
		{"openat2", func(f *Features) { f.Openat2 = no }, true, func(v Verdict) []string { return v.Notes }, "one component at a time"},
		{"landlock", func(f *Features) { f.LandlockScope = no }, true, func(v Verdict) []string { return v.Notes }, "abstract unix sockets"},
		{"userxattr", func(f *Features) { f.UserXattr = no }, true, func(v Verdict) []string { return v.Notes }, "without root"},
	} {
		f := allYes()
		tc.drop(&f)
		v := f.Verdict()
		if v.Runs != tc.runs || len(tc.in(v)) != 1 || !strings.Contains(tc.in(v)[0], tc.says) {
			t.Errorf("%s missing: %+v, want runs %t and one line saying %q", tc.name, v, tc.runs, tc.says)
		}
	}
	f := allYes()
	f.StatxMountID = no
	if l := f.Verdict().Lines(); l[0] != "layerseal runs here, and marks every statement incomplete:" || !strings.HasPrefix(l[1], "  incomplete: no-mount-id") {
		t.Errorf("lines of a kernel without mount IDs: %q", l)
	}
}

// TestVerdictWithLimits: a limit held by cgroup v1 is a note, one no
// hierarchy holds says that asking for it makes the statement incomplete.
func TestVerdictWithLimits(t *testing.T) {
	v := allYes().Verdict().WithLimits(map[string]string{"memory": "cgroup v2", "pids": "cgroup v2"})
	if len(v.Notes) != 0 {
		t.Errorf("limits held by cgroup v2: notes %q", v.Notes)
	}
	v = allYes().Verdict().WithLimits(map[string]string{"memory": "cgroup v1", "pids": ""})
	if len(v.Notes) != 2 || !strings.Contains(v.Notes[0], "--memory is held by the cgroup v1 memory controller") ||
		!strings.Contains(v.Notes[1], "--pids is not set") || !v.Runs {
		t.Errorf("memory on v1, pids nowhere: %+v", v)
	}
}
