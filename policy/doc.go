// Package policy reads a session's policy: the layerseal.yaml
// configuration (Parse), workspace globs (Compile), and the Rules that
// say which paths are summarized instead of itemized (exclusions) and
// which changes are forbidden (protected paths, less per-run allows).
//
// Start with Parse for a configuration file and build Rules from its
// Exclude and Protected globs plus the run's allows. The package is pure:
// it reads bytes and matches paths, and touches no filesystem.
package policy
