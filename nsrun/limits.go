package nsrun

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LimitHierarchies says, for each controller the agent's limits use
// ("memory" for MemoryMax, "pids" for PidsMax), which cgroup hierarchy of
// this host would hold a limit: "cgroup v2" (its v2 hierarchy has the
// controller), "cgroup v1" (a v1 hierarchy of a hybrid host has it) or
// "" (none: a limit asked for is not set and the statement says so). It
// reads the mount table and cgroup.controllers, as Start does.
func LimitHierarchies() map[string]string {
	out := map[string]string{"memory": "", "pids": ""}
	var v2 []string
	if root, _, err := cgroupMounts(); err == nil && root != "" {
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
			v2 = strings.Fields(string(b))
		}
	}
	v1, _ := v1Mounts()
	for ctl := range out {
		switch {
		case slices.Contains(v2, ctl):
			out[ctl] = "cgroup v2"
		case v1[ctl] != "":
			out[ctl] = "cgroup v1"
		}
	}
	return out
}
