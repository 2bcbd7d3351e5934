package nsrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnableController: a controller listed in the hierarchy's
// cgroup.controllers is enabled for the root's and the parent's children;
// one that is not (bound to cgroup v1) is an error that says so.
func TestEnableController(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, cgroupParent)
	must(t, os.Mkdir(parent, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644))
	for _, d := range []string{root, parent} {
		must(t, os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), nil, 0o644))
	}
	if err := enableController(root, parent, "pids"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, parent} {
		if b, _ := os.ReadFile(filepath.Join(d, "cgroup.subtree_control")); string(b) != "+pids" {
			t.Errorf("%s/cgroup.subtree_control holds %q, want +pids", d, b)
		}
	}
	must(t, os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("hugetlb\n"), 0o644))
	if err := enableController(root, parent, "memory"); err == nil || !strings.Contains(err.Error(), "memory controller is not available") {
		t.Errorf("memory not in the hierarchy: %v", err)
	}
}

// TestParseV1Cgroups: the memory and pids paths of a hybrid host's
// /proc/PID/cgroup, controllers co-mounted or not; v2's line and the
// others are not taken for them.
func TestParseV1Cgroups(t *testing.T) {
	in := "12:pids:/user.slice/user-0.slice/session-3.scope\n" +
		"9:cpu,cpuacct:/user.slice\n" +
		"4:memory,hugetlb:/a:b/c d\n" +
		"1:name=systemd:/user.slice\n" +
		"0::/user.slice/user-0.slice/session-3.scope\n" +
		"garbage\n"
	got := parseV1Cgroups([]byte(in))
	want := map[string]string{"pids": "/user.slice/user-0.slice/session-3.scope", "memory": "/a:b/c d"}
	if len(got) != len(want) || got["pids"] != want["pids"] || got["memory"] != want["memory"] {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestLimitHierarchies: each limit's controller is named with the
// hierarchy the mount table gives it.
func TestLimitHierarchies(t *testing.T) {
	got := LimitHierarchies()
	v1, err := v1Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, ctl := range []string{"memory", "pids"} {
		switch h := got[ctl]; {
		case h == "cgroup v1" && v1[ctl] == "":
			t.Errorf("%s: said to be on cgroup v1, which has no hierarchy of it", ctl)
		case h != "" && h != "cgroup v1" && h != "cgroup v2":
			t.Errorf("%s: hierarchy %q", ctl, h)
		case h == "" && v1[ctl] != "":
			t.Errorf("%s: said to be held nowhere, but cgroup v1 has it at %s", ctl, v1[ctl])
		}
	}
}
