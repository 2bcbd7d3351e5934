package linux

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A path longer than PATH_MAX opens in parts, under the same rules.
func TestOpenBeneathLongPath(t *testing.T) {
	root := t.TempDir()
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dir)
	comp := strings.Repeat("d", 200)
	var parts []string
	cur := dir
	for range 30 {
		if err := unix.Mkdirat(cur, comp, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(cur, comp, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cur != dir {
			unix.Close(cur)
		}
		cur = next
		parts = append(parts, comp)
	}
	if err := unix.Symlinkat("/etc", cur, "link"); err != nil {
		t.Fatal(err)
	}
	unix.Close(cur)
	deep := strings.Join(parts, "/")
	if len(deep) < unix.PathMax {
		t.Fatalf("path of %d bytes is not over PATH_MAX", len(deep))
	}
	fd, err := OpenBeneath(dir, deep, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		t.Fatalf("open %d-byte path: %v", len(deep), err)
	}
	unix.Close(fd)
	if _, err := OpenBeneath(dir, deep+"/link/passwd", unix.O_RDONLY); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("through a symlink at the far end: %v, want ELOOP", err)
	}
	if _, err := OpenBeneath(dir, deep+"/../"+deep, unix.O_RDONLY); !errors.Is(err, unix.EXDEV) {
		t.Errorf("with ..: %v, want EXDEV", err)
	}
	os.RemoveAll(root)
}
