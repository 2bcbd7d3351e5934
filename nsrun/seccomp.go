package nsrun

import (
	"fmt"
	"slices"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/seccomp"
)

// seccompAvailable tries whether the kernel takes seccomp filters that
// return every action the default filter uses (a variable for tests).
var seccompAvailable = linux.SeccompFiltersAvailable

// seccompFilter decides the agent's system call filter and records it in
// sb: nothing for "unconfined"; otherwise the default filter for the
// agent's bounding capabilities (all of them when the process names none),
// whose program it returns and whose digest it records. A kernel that takes
// no filters gives none, recorded as unconfined with a Missing sentence.
func seccompFilter(cfg *Config, sb *attest.Sandbox) (seccomp.Program, error) {
	sb.Seccomp, sb.SeccompSHA256 = "unconfined", nil
	if cfg.Sandbox.withDefaults().Seccomp == "unconfined" {
		return nil, nil
	}
	if err := seccompAvailable(); err != nil {
		sb.Missing = append(sb.Missing, fmt.Sprintf(
			"the kernel takes no seccomp filters (%v): the agent ran without the default system call filter", err))
		return nil, nil
	}
	var bounding []string
	if c := cfg.Process.Capabilities; c != nil {
		bounding = c.Bounding
	} else {
		for name := range capNames {
			bounding = append(bounding, name)
		}
		slices.Sort(bounding)
	}
	prog, err := seccomp.Default(bounding)
	if err != nil {
		return nil, fmt.Errorf("build the agent's seccomp filter (--seccomp unconfined runs without it): %w", err)
	}
	sb.Seccomp, sb.SeccompSHA256 = "default", prog.SHA256()
	return prog, nil
}
