package probe

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"
)

// Status is the answer to "does this kernel offer the feature?".
type Status string

const (
	Yes     Status = "yes"     // tried and it worked
	No      Status = "no"      // tried and it failed, or removed by a simulation
	Unknown Status = "unknown" // could not be tried (for example: needs root)
)

// UnmarshalText accepts exactly "yes", "no" and "unknown".
func (s *Status) UnmarshalText(b []byte) error {
	switch v := Status(b); v {
	case Yes, No, Unknown:
		*s = v
		return nil
	}
	return fmt.Errorf("probe status %q: want yes, no or unknown", b)
}

// Finding is what one trial found.
type Finding struct {
	Status Status `json:"status"`
	// Detail says how the status was found ("trial mount", "statx mask"), or
	// the error seen when the trial failed ("EINVAL"), or why it could not be
	// tried ("needs root"). A short human string, not meant to be parsed.
	Detail string `json:"detail"`
}

// OK reports whether the feature was found available.
func (f Finding) OK() bool { return f.Status == Yes }

// PinnedOverlayOptions are the overlay mount options layerseal passes
// explicitly on every mount, because module parameters can change their
// defaults at run time. With them the upper layer holds no redirects, no
// metacopy files and no index, which is what lets it be read as the complete
// change set.
var PinnedOverlayOptions = []string{
	"redirect_dir=nofollow",
	"metacopy=off",
	"index=off",
	"nfs_export=off",
	"xino=off",
	"uuid=null",
}

// paramsDir holds one file per overlay module parameter.
const paramsDir = "/sys/module/overlay/parameters"

// OptionFinding is whether overlay accepted one mount option.
type OptionFinding struct {
	Option string `json:"option"`
	Finding
}

// Features is what the running kernel offers that layerseal depends on. Every
// item was found by trying it; its Finding says how.
type Features struct {
	// KernelRelease is uname's release string. It is recorded, never used to
	// decide anything.
	KernelRelease string `json:"kernel_release"`

	// StatxMountID: statx with STATX_MNT_ID reports a mount ID (Linux 5.8).
	// Without it bind mounts from the same filesystem cannot be told apart.
	StatxMountID Finding `json:"statx_mnt_id"`
	// StatxMountIDUnique: statx with STATX_MNT_ID_UNIQUE reports a 64-bit
	// mount ID that is never reused (Linux 6.8).
	StatxMountIDUnique Finding `json:"statx_mnt_id_unique"`
	// Openat2: openat2 with RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS,
	// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_XDEV works (Linux 5.6).
	Openat2 Finding `json:"openat2"`
	// LandlockScope: Landlock ABI 6 or later (Linux 6.12), whose scopes keep
	// the agent from the host's abstract unix sockets and from signalling
	// outside its own processes. Without it an agent sharing the host's
	// network can connect to the host's abstract unix sockets.
	LandlockScope Finding `json:"landlock_scope"`
	// Seccomp: the kernel takes seccomp filters returning every action the
	// agent's default system call filter uses (Linux 4.14). Without it the
	// agent runs unfiltered and every statement is incomplete (sandbox).
	Seccomp Finding `json:"seccomp"`

	// Overlay: an overlay filesystem can be mounted (trial mount as root;
	// otherwise only whether /proc/filesystems lists it).
	Overlay Finding `json:"overlay"`
	// OverlayOptions holds one trial mount per entry of
	// PinnedOverlayOptions, in that order, each option alone.
	OverlayOptions []OptionFinding `json:"overlay_options"`
	// OverlayPinned: one overlay mount with all of PinnedOverlayOptions
	// together, as layerseal mounts it, succeeded.
	OverlayPinned Finding `json:"overlay_pinned"`
	// UserXattr: overlay accepts the userxattr option (Linux 5.11), needed for
	// mounts made without real root.
	UserXattr Finding `json:"userxattr"`
	// OverlayParams maps each file in /sys/module/overlay/parameters to its
	// trimmed contents. They set defaults that layerseal overrides explicitly.
	// Empty when the overlay module is not loaded.
	OverlayParams map[string]string `json:"overlay_params"`
	// OverlayParamsNote says why OverlayParams is empty or incomplete; empty
	// when every parameter was read.
	OverlayParamsNote string `json:"overlay_params_note,omitempty"`

	// Simulated lists the simulations applied (see Without), in the order
	// given. Empty when the findings are the kernel's own.
	Simulated []string `json:"simulated,omitempty"`
}

// Option returns the finding for one of PinnedOverlayOptions, or an Unknown
// finding when opt was not tried.
func (f Features) Option(opt string) Finding {
	for _, o := range f.OverlayOptions {
		if o.Option == opt {
			return o.Finding
		}
	}
	return Finding{Status: Unknown, Detail: "not tried"}
}

// WriteText writes f for people, one aligned line per item:
//
//	statx STATX_MNT_ID     yes (statx mask)
//	openat2                no (ENOSYS)
//
// followed by the overlay module parameters and any simulation applied.
// Strings that are not printable are quoted.
func (f Features) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(label string, fd Finding) {
		fmt.Fprintf(tw, "%s\t%s\n", label, finding(fd))
	}
	fmt.Fprintf(tw, "kernel release\t%s\n", printable(f.KernelRelease))
	line("statx STATX_MNT_ID", f.StatxMountID)
	line("statx STATX_MNT_ID_UNIQUE", f.StatxMountIDUnique)
	line("openat2", f.Openat2)
	line("landlock scopes", f.LandlockScope)
	line("seccomp filters", f.Seccomp)
	line("overlay", f.Overlay)
	for _, o := range f.OverlayOptions {
		line("overlay "+printable(o.Option), o.Finding)
	}
	line("overlay pinned options", f.OverlayPinned)
	line("overlay userxattr", f.UserXattr)
	params := "none"
	if len(f.OverlayParams) > 0 {
		params = "from " + paramsDir
	}
	if f.OverlayParamsNote != "" {
		params += " (" + f.OverlayParamsNote + ")"
	}
	fmt.Fprintf(tw, "overlay module parameters\t%s\n", printable(params))
	for _, k := range slices.Sorted(maps.Keys(f.OverlayParams)) {
		fmt.Fprintf(tw, "  %s\t%s\n", printable(k), printable(f.OverlayParams[k]))
	}
	if len(f.Simulated) > 0 {
		quoted := make([]string, len(f.Simulated))
		for i, s := range f.Simulated {
			quoted[i] = printable(s)
		}
		fmt.Fprintf(tw, "simulated\t%s\n", strings.Join(quoted, ","))
	}
	return tw.Flush()
}

// finding renders "yes", "no (EINVAL)", "unknown (needs root)".
func finding(fd Finding) string {
	s := printable(string(fd.Status))
	if fd.Detail != "" {
		s += " (" + printable(fd.Detail) + ")"
	}
	return s
}

// printable returns s unchanged when it is valid UTF-8 made of printable
// characters and plain spaces (no tabs or newlines, which would break the
// alignment), and quoted otherwise.
func printable(s string) string {
	if !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}
