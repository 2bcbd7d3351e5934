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
