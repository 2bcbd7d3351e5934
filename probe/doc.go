// Package probe finds out what the running kernel offers that layerseal
// depends on, by trying each feature rather than by reading version numbers.
//
// Start with [Detect]: it returns [Features], one [Finding] per feature, each
// saying yes, no or unknown and how that was found (or the error seen). The
// overlay items are found by real trial mounts, which need root; without root
// they read as unknown, never as no. [DetectCached] is Detect with those trial
// mounts made once per boot and their findings kept in a root-only file.
// [Features.WriteText] renders the human output of `layerseal probe`; the
// JSON encoding of Features is the machine output and the form kept in a
// launch record.
//
// For tests, and to exercise the honest paths of kernels without some
// feature, the environment variable LAYERSEAL_SIMULATE (see [SimulateEnv] and
// [Features.Without]) makes chosen features read as absent. A simulation only
// ever removes capabilities, so it can make a statement incomplete but never
// cleaner, and Detect records it in [Features.Simulated].
package probe
