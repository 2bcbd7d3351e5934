package probe

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SimulateEnv is the environment variable Detect reads for simulations: a
// comma-separated list of names from Simulations, for example
// "no-statx-mnt-id,no-openat2". Spaces around names and empty names are
// ignored.
const SimulateEnv = "LAYERSEAL_SIMULATE"

// optionPrefix starts the simulation that removes one pinned overlay option:
// "no-option:uuid=null".
const optionPrefix = "no-option:"

// Simulations returns every name Without accepts, sorted:
//
//	no-statx-mnt-id         STATX_MNT_ID and STATX_MNT_ID_UNIQUE (kernel < 5.8)
//	no-statx-mnt-id-unique  STATX_MNT_ID_UNIQUE only (kernel < 6.8)
//	no-openat2              openat2 (kernel < 5.6)
//	no-overlay              overlay and everything mounted with it
//	no-userxattr            the userxattr option (kernel < 5.11)
//	no-option:OPT           one of PinnedOverlayOptions, and so the pinned set
func Simulations() []string {
	names := []string{"no-statx-mnt-id", "no-statx-mnt-id-unique", "no-openat2", "no-overlay", "no-userxattr"}
	for _, o := range PinnedOverlayOptions {
		names = append(names, optionPrefix+o)
	}
	slices.Sort(names)
	return names
}

// ParseSimulate splits a SimulateEnv value into names and checks each
// against Simulations. It returns an error naming the first unknown name.
func ParseSimulate(v string) ([]string, error) {
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if err := checkSimulations(names); err != nil {
		return nil, err
	}
	return names, nil
}

func checkSimulations(names []string) error {
	known := Simulations()
	for _, n := range names {
		if _, ok := slices.BinarySearch(known, n); !ok {
			return fmt.Errorf("%s: unknown simulation %q (known: %s)", SimulateEnv, n, strings.Join(known, ", "))
		}
	}
	return nil
}

// Without returns a copy of f in which the features the named simulations
// remove read as No with the detail "simulated: NAME", and the names are
// appended to Simulated (each once). A simulation only ever removes: no
// finding becomes more available than it was, so a simulated kernel can make
// a statement incomplete but never cleaner. Unknown names are an error and
// leave nothing changed.
func (f Features) Without(names ...string) (Features, error) {
	if err := checkSimulations(names); err != nil {
		return f, err
	}
	g := f
	g.OverlayOptions = slices.Clone(f.OverlayOptions)
	g.OverlayParams = maps.Clone(f.OverlayParams)
	g.Simulated = slices.Clone(f.Simulated)
	for _, n := range names {
		removed := Finding{Status: No, Detail: "simulated: " + n}
		switch {
		case n == "no-statx-mnt-id":
			g.StatxMountID = removed
			g.StatxMountIDUnique = removed
		case n == "no-statx-mnt-id-unique":
			g.StatxMountIDUnique = removed
		case n == "no-openat2":
			g.Openat2 = removed
		case n == "no-overlay":
			g.Overlay = removed
			for i := range g.OverlayOptions {
				g.OverlayOptions[i].Finding = removed
			}
			g.OverlayPinned = removed
			g.UserXattr = removed
		case n == "no-userxattr":
			g.UserXattr = removed
		case strings.HasPrefix(n, optionPrefix):
			opt := strings.TrimPrefix(n, optionPrefix)
			i := slices.IndexFunc(g.OverlayOptions, func(o OptionFinding) bool { return o.Option == opt })
			if i < 0 {
				g.OverlayOptions = append(g.OverlayOptions, OptionFinding{Option: opt})
				i = len(g.OverlayOptions) - 1
			}
			g.OverlayOptions[i].Finding = removed
			g.OverlayPinned = removed
		}
		if !slices.Contains(g.Simulated, n) {
			g.Simulated = append(g.Simulated, n)
		}
	}
	return g, nil
}
