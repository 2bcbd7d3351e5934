//go:build !linux

package probe

import (
	"os"
	"runtime"
)

// Detect reports every feature Unknown: layerseal runs agents only on Linux,
// and this build exists so that packages reading Features (a verifier, for
// one) build anywhere. Simulations from SimulateEnv are applied as on Linux;
// the only error is a SimulateEnv value naming an unknown simulation.
func Detect() (Features, error) {
	sims, err := ParseSimulate(os.Getenv(SimulateEnv))
	if err != nil {
		return Features{}, err
	}
	unknown := Finding{Status: Unknown, Detail: "not Linux (" + runtime.GOOS + ")"}
	f := Features{
		StatxMountID:       unknown,
		StatxMountIDUnique: unknown,
		Openat2:            unknown,
		LandlockScope:      unknown,
		Overlay:            unknown,
		OverlayPinned:      unknown,
		UserXattr:          unknown,
		OverlayParams:      map[string]string{},
		OverlayParamsNote:  "not Linux",
	}
	for _, o := range PinnedOverlayOptions {
		f.OverlayOptions = append(f.OverlayOptions, OptionFinding{Option: o, Finding: unknown})
	}
	return f.Without(sims...)
}

// CacheFile is the name of the file DetectCached keeps on Linux.
const CacheFile = "kernel-features.json"

// DetectCached is Detect: there is nothing to cache off Linux.
func DetectCached(path string) (Features, error) { return Detect() }
