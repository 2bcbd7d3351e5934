package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/nsrun"
)

// TestSetEnv: an --env of a name the environment holds replaces it, so
// the launch record names one PATH, not the default and the operator's.
func TestSetEnv(t *testing.T) {
	env := nsrun.DefaultEnv(0, "xterm")
	for _, kv := range []string{"PATH=/usr/local/go/bin:/usr/bin:/bin", "GOCACHE=/tmp/go-build", "PATHX=1", "GOCACHE=/tmp/c2"} {
		env = setEnv(env, kv)
	}
	want := []string{"HOME=/root", "TERM=xterm", "PATH=/usr/local/go/bin:/usr/bin:/bin", "PATHX=1", "GOCACHE=/tmp/c2"}
	if !slices.Equal(env, want) {
		t.Errorf("got %q, want %q", env, want)
	}
}

// TestAddEnv: --env NAME takes the caller's value and is named as
// inherited, unless a later NAME=VALUE replaces it; an empty name or a
// NAME the caller lacks is refused, naming it and never echoing a value.
func TestAddEnv(t *testing.T) {
	caller := map[string]string{"MY_API_KEY": "k3y", "EMPTY": ""}
	lookup := func(n string) (string, bool) { v, ok := caller[n]; return v, ok }
	env, inherited, err := addEnv([]string{"HOME=/root"}, []string{"MY_API_KEY", "FOO=bar", "EMPTY", "GITHUB_TOKEN=s3cr3t", "EMPTY=given", "A=b=c"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"HOME=/root", "MY_API_KEY=k3y", "FOO=bar", "GITHUB_TOKEN=s3cr3t", "EMPTY=given", "A=b=c"}; !slices.Equal(env, want) {
		t.Errorf("env %q, want %q", env, want)
	}
	if want := []string{"MY_API_KEY"}; !slices.Equal(inherited, want) {
		t.Errorf("inherited %q, want %q", inherited, want)
	}
	for _, bad := range []struct{ arg, want string }{
		{"NOT_SET_ANYWHERE", `NOT_SET_ANYWHERE is not set in this environment`},
		{"=s3cr3t", "empty NAME"},
		{"", "empty NAME"},
	} {
		_, _, err := addEnv(nil, []string{bad.arg}, lookup)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--env %q: error %v, want one saying %q", bad.arg, err, bad.want)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("--env %q: error %q repeats the value", bad.arg, err)
		}
	}
}
