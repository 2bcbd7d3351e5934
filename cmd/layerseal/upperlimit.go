package main

import (
	"fmt"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/policy"
)

// readUpperLimits sets p's MaxUpper and MinFree from run's flags
// (--min-free 0: no reserve, a negative MinFree for layerseal.Run).
func readUpperLimits(cmd *cli.Command, p *attest.Policy) error {
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"max-upper", &p.MaxUpper}, {"min-free", &p.MinFree}} {
		if s := cmd.String(f.name); s == "0" && f.name == "min-free" {
			*f.dst = -1 // no reserve
		} else if s != "" {
			n, err := policy.ParseSize(s)
			if err != nil {
				return usageErr("run: --%s %q: want a size such as 512MiB or 10GiB", f.name, s)
			}
			*f.dst = n
		}
	}
	return nil
}

// upperLimitText says how a launch record's policy bounded the upper
// layer, such as "at most 8388608 bytes on disk; 5368709120 bytes kept
// free on the state dir's filesystem".
func upperLimitText(p attest.Policy) string {
	s := "no limit of its own"
	if p.MaxUpper > 0 {
		s = fmt.Sprintf("at most %d bytes on disk", p.MaxUpper)
	}
	if p.MinFree > 0 {
		s += fmt.Sprintf("; %d bytes kept free on the state dir's filesystem", p.MinFree)
	}
	return s
}
