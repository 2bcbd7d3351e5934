package policy

import (
	"slices"
	"strings"
	"testing"
)

func TestParseView(t *testing.T) {
	c, err := Parse("layerseal.yaml", []byte("view: host\nro: [/opt/sdk, /srv/data/]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.View != ViewHost || !slices.Equal(c.ReadOnly, []string{"/opt/sdk", "/srv/data"}) {
		t.Errorf("view %q, ro %q", c.View, c.ReadOnly)
	}
	if c, err := Parse("layerseal.yaml", []byte("exclude: [a]\n")); err != nil || c.View != "" || c.ReadOnly != nil {
		t.Errorf("no view given: %+v, %v", c, err)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"view: whole\n", `line 1: view "whole": want minimal or host`},
		{"view: [host]\n", "line 1"},
		{"ro: /opt\n", "line 1: want a list of absolute paths"},
		{"exclude: [a]\nro: [opt/sdk]\n", `line 2: "opt/sdk": want an absolute path`},
		{"ro:\n  - /opt\n  - ~\n", "line 3"},
		{"rw: [/opt]\n", `unknown key "rw"`},
	} {
		_, err := Parse("layerseal.yaml", []byte(bad.yaml))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", bad.yaml, err, bad.want)
		}
	}
}
