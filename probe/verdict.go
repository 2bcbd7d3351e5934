package probe

import "fmt"

// Verdict is what layerseal does on a kernel, in sentences, derived from
// its Features: whether it runs at all, what makes every statement made
// there incomplete, and what it records or does otherwise. It follows the
// table in docs/KERNELS.md.
type Verdict struct {
	// Runs is false when layerseal refuses to run an agent on this kernel
	// (or could not tell: the overlay items need root).
	Runs bool `json:"runs"`
	// Refusals say why it does not run; Incomplete what every statement
	// made here says it could not do; Notes what it does otherwise.
	Refusals   []string `json:"refusals"`
	Incomplete []string `json:"incomplete"`
	Notes      []string `json:"notes"`
}

// Verdict says what layerseal does with the features f.
func (f Features) Verdict() Verdict {
	v := Verdict{Refusals: []string{}, Incomplete: []string{}, Notes: []string{}}
	refuse := func(format string, args ...any) { v.Refusals = append(v.Refusals, fmt.Sprintf(format, args...)) }
	incomplete := func(format string, args ...any) { v.Incomplete = append(v.Incomplete, fmt.Sprintf(format, args...)) }
	note := func(format string, args ...any) { v.Notes = append(v.Notes, fmt.Sprintf(format, args...)) }

	switch f.Overlay.Status {
	case No:
		refuse("the kernel mounts no overlay filesystem (%s)", f.Overlay.Detail)
	case Unknown:
		refuse("whether the kernel mounts an overlay with the options layerseal pins was not tried (%s): run `layerseal probe` as root", f.Overlay.Detail)
	}
	if f.Overlay.Status == Yes && f.OverlayPinned.Status == Unknown {
		note("the overlay options layerseal pins were not tried (%s): `layerseal probe` as root gives the whole verdict", f.OverlayPinned.Detail)
	}
	if f.Overlay.Status == Yes {
		for _, opt := range []string{"redirect_dir=nofollow", "metacopy=off", "index=off"} {
			if o := f.Option(opt); o.Status == No {
				refuse("overlay refuses %s (%s): without it the upper layer is not the complete change set", opt, o.Detail)
			}
		}
		for _, opt := range []string{"uuid=null", "xino=off", "nfs_export=off"} {
			if o := f.Option(opt); o.Status == No {
				note("overlay is mounted without %s (%s); the launch record lists it as missing", opt, o.Detail)
			}
		}
	}
	switch {
	case f.StatxMountID.Status == No:
		incomplete("no-mount-id: statx reports no mount IDs (%s), so mounts are told apart by device only; verify exits 2", f.StatxMountID.Detail)
	case f.StatxMountIDUnique.Status == No:
		note("mounts are identified by the reusable 32-bit mount ID (no STATX_MNT_ID_UNIQUE); the launch record says so")
	}
	if f.Seccomp.Status == No {
		incomplete("sandbox: the kernel takes no seccomp filter (%s), so the agent runs without the system call filter", f.Seccomp.Detail)
	}
	if f.Openat2.Status == No {
		note("paths are opened one component at a time with O_NOFOLLOW (no openat2: %s): as strict, slower", f.Openat2.Detail)
	}
	if f.LandlockScope.Status == No {
		note("the agent is not Landlock-scoped (%s): sharing the host's network it can connect to the host's abstract unix sockets; recorded, not an incomplete reason", f.LandlockScope.Detail)
	}
	if f.UserXattr.Status == No {
		note("overlay refuses userxattr (%s): layerseal cannot run an agent without root here", f.UserXattr.Detail)
	}
	v.Runs = len(v.Refusals) == 0
	return v
}

// Lines are the verdict for people: the first says whether layerseal runs
// and whether its statements can be complete, the others why.
func (v Verdict) Lines() []string {
	var out []string
	switch {
	case !v.Runs:
		out = append(out, "layerseal does not run agents on this kernel:")
		for _, r := range v.Refusals {
			out = append(out, "  refuses: "+printable(r))
		}
	case len(v.Incomplete) > 0:
		out = append(out, "layerseal runs here, and marks every statement incomplete:")
	default:
		out = append(out, "layerseal runs here, and its statements can be complete")
	}
	for _, r := range v.Incomplete {
		out = append(out, "  incomplete: "+printable(r))
	}
	for _, n := range v.Notes {
		out = append(out, "  note: "+printable(n))
	}
	return out
}

// WithLimits adds to v what the host's cgroups mean for the agent's
// limits: hierarchies maps "memory" and "pids" to the hierarchy that holds
// such a limit ("cgroup v2", "cgroup v1"), or "" for none (see
// nsrun.LimitHierarchies).
func (v Verdict) WithLimits(hierarchies map[string]string) Verdict {
	for _, c := range []struct{ ctl, flag string }{{"memory", "--memory"}, {"pids", "--pids"}} {
		switch h := hierarchies[c.ctl]; h {
		case "":
			v.Notes = append(v.Notes, fmt.Sprintf("no cgroup hierarchy here has the %s controller: %s is not set, and a statement of a run that asks for it is incomplete (sandbox)", c.ctl, c.flag))
		case "cgroup v1":
			v.Notes = append(v.Notes, fmt.Sprintf("%s is held by the cgroup v1 %s controller (the v2 hierarchy lacks it); the launch record says so", c.flag, c.ctl))
		}
	}
	return v
}
