package policy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/egress"
)

func TestParseNetwork(t *testing.T) {
	c, err := Parse("layerseal.yaml", []byte("network:\n  allow: [API.example.com, \"*.pypi.org\", \"127.0.0.1:8080\", \"[::1]:9\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []egress.Allow{{Host: "api.example.com"}, {Host: "*.pypi.org"}, {Host: "127.0.0.1", Port: 8080}, {Host: "::1", Port: 9}}
	if !reflect.DeepEqual(c.AllowNet, want) {
		t.Errorf("allow %+v, want %+v", c.AllowNet, want)
	}
	if c, err := Parse("layerseal.yaml", []byte("apply: auto\n")); err != nil || c.AllowNet != nil {
		t.Errorf("no network key: %+v, %v", c.AllowNet, err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"network: [a.example]\n", "line 1: network takes a mapping"},
		{"network:\n  allow: a.example\n", "line 2: network allow takes a list"},
		{"network:\n  allow: [a.example]\n  deny: [b.example]\n", `line 3: unknown key "deny"`},
		{"network:\n  allow:\n    - a.example\n    - \"a.example:99999\"\n", `line 4: network allow: allowed destination "a.example:99999"`},
		{"network:\n  allow: [\"*\"]\n", `"*"`},
		{"network:\n  allow: [~]\n", "line 2: network allow: want HOST[:PORT]"},
		{"network:\n  allow: [{a: b}]\n", "line 2: network allow: want HOST[:PORT]"},
		{"network: {allow: [a], allow: [b]}\n", "line 1"},
		{"netwrk: {allow: [a]}\n", "network (allow)"},
	} {
		_, err := Parse("layerseal.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}
