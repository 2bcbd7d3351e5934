package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/internal/privtest"
)

const goodLog = "SeaBIOS\r\n" +
	"@@kt kernel 6.1.0-57-amd64\r\n" +
	"@@kt probe plain begin\r\n" +
	`{"kernel_release":"6.1.0-57-amd64","statx_mnt_id":{"status":"yes","detail":"statx mask"},` + "\r\n" +
	"[   49.145509] overlayfs: unrecognized mount option \"uuid=null\" or missing value\r\n" +
	`"overlay_options":[{"option":"uuid=null","status":"no","detail":"EINVAL"}]}` + "\r\n" +
	"@@kt probe plain end\r\n" +
	"@@kt suite plain overlay begin\r\n" +
	"PASS\r\n" +
	"@@kt suite plain overlay pass 0 12\r\n" +
	"@@kt suite plain kernel-tests begin\r\n" +
	"@@kt report plain overlay-missing uuid=null\r\n" +
	"@@kt suite plain kernel-tests pass 0 2\r\n" +
	"@@kt end\r\n" +
	"[   52.817846] reboot: Power down\r\n"

func TestParseLogPass(t *testing.T) {
	c := parseLog("6.1", strings.NewReader(goodLog))
	if c.Failed() {
		t.Fatalf("failed: %q", c.Problems)
	}
	if c.Release != "6.1.0-57-amd64" || !c.Ended {
		t.Errorf("release %q, ended %v", c.Release, c.Ended)
	}
	if got := c.Cells["plain overlay"]; !got.Pass || got.Seconds != 12 {
		t.Errorf("overlay cell %+v", got)
	}
	f, ok := c.Features["plain"]
	if !ok || !f.StatxMountID.OK() || f.Option("uuid=null").OK() {
		t.Errorf("probe findings %+v (kernel messages inside the JSON must be skipped)", f)
	}
	if c.Reports["plain"]["overlay-missing"] != "uuid=null" {
		t.Errorf("reports %q", c.Reports)
	}
}

func TestParseLogFailures(t *testing.T) {
	cases := []struct {
		name, log string
		problem   string // a problem that must be listed ("" for none)
		cell      string // a cell that must have failed ("" for none)
	}{
		{"failed suite", strings.Replace(goodLog, "overlay pass 0 12", "overlay fail 1 12", 1), "", "plain overlay"},
		{"pass with a nonzero exit", strings.Replace(goodLog, "overlay pass 0 12", "overlay pass 2 12", 1), "", "plain overlay"},
		{"no end marker", strings.Replace(goodLog, "@@kt end\r\n", "", 1), "no end marker", ""},
		{"died in a suite", goodLog[:strings.Index(goodLog, "@@kt suite plain kernel-tests pass")] +
			"[   50.1] Kernel panic - not syncing: Attempted to kill init!\r\n", "kernel panic", "plain kernel-tests"},
		{"empty log", "", "no end marker", ""},
		{"bad probe JSON", strings.Replace(goodLog, `"overlay_options"`, `overlay_options`, 1), "probe (plain)", ""},
		{"module not loaded", strings.Replace(goodLog, "@@kt kernel", "@@kt module overlay.ko failed\n@@kt kernel", 1), "module overlay.ko failed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			col := parseLog("k", strings.NewReader(c.log))
			if !col.Failed() {
				t.Fatalf("not failed; problems %q", col.Problems)
			}
			if c.problem != "" && !slices.ContainsFunc(col.Problems, func(p string) bool { return strings.HasPrefix(p, c.problem) }) {
				t.Errorf("problems %q, want one starting %q", col.Problems, c.problem)
			}
			if c.cell != "" && col.Cells[c.cell].Pass {
				t.Errorf("cell %q passed", c.cell)
			}
			if len(col.Tail) == 0 && c.log != "" {
				t.Errorf("no log tail kept")
			}
		})
	}
}

func TestMatrixText(t *testing.T) {
	ok := parseLog("6.1", strings.NewReader(goodLog))
	bad := parseLog("5.10", strings.NewReader(strings.Replace(goodLog, "overlay pass 0 12", "overlay fail 1 12", 1)))
	var b bytes.Buffer
	writeText(&b, []*Column{ok, bad})
	out := b.String()
	for _, want := range []string{"6.1 (6.1.0-57-amd64)", "pass 12s", "FAIL(1)", "uuid=null"} {
		if !strings.Contains(out, want) {
			t.Errorf("matrix lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	writeMarkdown(&b, []*Column{ok, bad})
	if !strings.Contains(b.String(), "| overlay | pass 12s | FAIL(1) |") {
		t.Errorf("markdown matrix:\n%s", b.String())
	}
}

func TestCompareVersions(t *testing.T) {
	names := []string{"linux-image-6.1.0-9-amd64", "linux-image-6.1.0-57-amd64", "linux-image-6.1.0-10-amd64"}
	slices.SortFunc(names, compareVersions)
	if want := []string{"linux-image-6.1.0-9-amd64", "linux-image-6.1.0-10-amd64", "linux-image-6.1.0-57-amd64"}; !slices.Equal(names, want) {
		t.Errorf("sorted %q, want %q", names, want)
	}
	for _, k := range Kernels {
		if !k.Package.MatchString("linux-image-" + map[string]string{"5.10": "5.10.0-46", "6.1": "6.1.0-57", "6.12": "6.12.113+deb12"}[k.Series] + "-amd64-unsigned") {
			t.Errorf("kernel %s: pattern %q does not match its package", k.Series, k.Package)
		}
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{"overlay.ko": "overlay", "virtio-blk.ko.xz": "virtio_blk", "ext4.ko.zst": "ext4"} {
		if got, ok := moduleName(in); !ok || got != want {
			t.Errorf("moduleName(%q) = %q, %v", in, got, ok)
		}
	}
	if _, ok := moduleName("modules.dep"); ok {
		t.Errorf("modules.dep taken for a module")
	}
}

// TestCPIO checks the archive with the cpio tool when there is one; the
// full test run (scripts/test, which installs it) requires it.
func TestCPIO(t *testing.T) {
	cpio, err := exec.LookPath("cpio")
	if err != nil {
		if privtest.Enabled() {
			t.Fatal("no cpio tool to read the archive back: scripts/setup test installs it")
		}
		t.Skip("no cpio tool to read the archive back")
	}
	var b bytes.Buffer
	c := newCPIO(&b)
	c.Dir("d")
	c.File("d/f", 0o644, []byte("hello"))
	c.File("odd", 0o755, []byte("x"))
	c.Symlink("d/l", "f")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(cpio, "-id", "--quiet")
	cmd.Dir, cmd.Stdin = dir, &b
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -id: %v: %s", err, out)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "d", "l")); err != nil || string(got) != "hello" {
		t.Errorf("d/l → %q, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "odd")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("odd: %v, %v", fi, err)
	}
}

// By default the nostatx suites run on the host and the oldest kernel
// booted, whatever order -kernels names them in; -nostatx changes that.
func TestNostatxWhere(t *testing.T) {
	k510, k61, k612 := Kernels[0], Kernels[1], Kernels[2]
	cases := []struct {
		where   string
		kernels []Kernel
		k       Kernel
		want    string
	}{
		{"oldest", []Kernel{k612, k510, k61}, k510, ""},
		{"oldest", []Kernel{k612, k510, k61}, k61, "-"},
		{"oldest", []Kernel{k612, k510, k61}, k612, "-"},
		{"oldest", []Kernel{k612, k510, k61}, Kernel{}, ""},
		{"oldest", []Kernel{k612}, k612, ""},
		{"all", []Kernel{k510, k612}, k612, ""},
		{"none", []Kernel{k510}, k510, "-"},
		{"none", []Kernel{k510}, Kernel{}, "-"},
	}
	for _, c := range cases {
		cfg := config{kernels: c.kernels, nostatx: c.where, suites: "nsrun"}
		got := cfg.guestOptions(guestOptions{}, c.k)
		if got.nostatx != c.want || got.suites != "nsrun" {
			t.Errorf("-nostatx %s, kernels %v, guest %q: %+v, want nostatx %q", c.where, c.kernels, c.k.Series, got, c.want)
		}
	}
	// The self-check's own options win.
	cfg := config{kernels: []Kernel{k510}, nostatx: "all", suites: "nsrun"}
	if got := cfg.guestOptions(guestOptions{suites: "kernel-tests", nostatx: "-"}, k510); got.suites != "kernel-tests" || got.nostatx != "-" {
		t.Errorf("self-check options overridden: %+v", got)
	}
}
