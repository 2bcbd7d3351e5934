package main

import (
	"slices"
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
