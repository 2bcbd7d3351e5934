package main

import (
	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// readUpperLimits sets p's MaxUpper and MinFree from run's flags.
func readUpperLimits(cmd *cli.Command, p *attest.Policy) error {
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"max-upper", &p.MaxUpper}, {"min-free", &p.MinFree}} {
		if s := cmd.String(f.name); s != "" {
			n, err := policy.ParseSize(s)
			if err != nil {
				return usageErr("run: --%s %q: want a size such as 512MiB or 10GiB", f.name, s)
			}
			*f.dst = n
		}
	}
	return nil
}
