package policy

import (
	"strings"
	"testing"
)

// TestParseUpperLimits: max_upper and min_free are sizes as digest_cap
// is, 0 when not given, and a value that is not a positive size is
// refused naming its line and the value.
func TestParseUpperLimits(t *testing.T) {
	c, err := Parse("layerseal.yaml", []byte("apply: stage\nmax_upper: 10GiB\nmin_free: 500MB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxUpper != 10<<30 || c.MinFree != 500e6 {
		t.Errorf("max_upper %d, min_free %d", c.MaxUpper, c.MinFree)
	}
	if c, err := Parse("layerseal.yaml", []byte("apply: stage\n")); err != nil || c.MaxUpper != 0 || c.MinFree != 0 {
		t.Errorf("no limits given: %+v, %v", c, err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"max_upper: 0\n", `line 1: "0" is not a positive byte count`},
		{"apply: stage\nmax_upper: lots\n", `line 2: "lots"`},
		{"min_free: -1GiB\n", `line 1: "-1GiB"`},
		{"min_free: [1]\n", "line 1: want a byte count"},
		{"max_uper: 1GiB\n", "max_upper, min_free, network (allow), view, ro)"},
	} {
		_, err := Parse("layerseal.yaml", []byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", bad.yaml, err, bad.want)
		}
	}
}
