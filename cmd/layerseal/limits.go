package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/layerseal/layerseal/attest"
)

// writeLimits prints the agent's resource limits from a launch record, and
// the names of the environment variables whose values it does not hold.
func writeLimits(w io.Writer, l *attest.LaunchRecord) {
	limit := func(n int64, unit, ctl string) string {
		if n == 0 {
			return map[string]string{"pids": "no process limit", "memory": "no memory limit"}[ctl]
		}
		s := fmt.Sprintf("%d %s", n, unit)
		if l.Sandbox.CgroupV1[ctl] != "" {
			s += " (cgroup v1)"
		}
		return s
	}
	fmt.Fprintf(w, "limits: %s, %s\n", limit(l.Sandbox.PidsMax, "processes", "pids"), limit(l.Sandbox.MemoryMax, "bytes of memory", "memory"))
	if len(l.EnvNotRecorded) > 0 {
		names := make([]string, len(l.EnvNotRecorded))
		for i, n := range l.EnvNotRecorded {
			names[i] = fmt.Sprintf("%q", n)
		}
		fmt.Fprintf(w, "environment not recorded (names only): %s\n", strings.Join(names, " "))
	}
}
