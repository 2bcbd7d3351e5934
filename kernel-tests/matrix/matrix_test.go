package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// A kernel's nostatx pass boots in a guest of its own; the self-check's
// injected failures and a kernel without the pass stay in one guest.
func TestPasses(t *testing.T) {
	split := guestOptions{suites: "nsrun"}.passes()
	if len(split) != 2 || split[0].opt.nostatx != "-" || split[0].opt.noPlain || !split[1].opt.noPlain || split[1].suffix != "-nostatx" {
		t.Fatalf("passes %+v, want a plain guest and a nostatx guest", split)
	}
	if got := split[1].opt.cmdline(); !strings.Contains(got, "kt.plain=0") || !strings.Contains(got, "kt.suites=nsrun") {
		t.Errorf("nostatx guest's command line %q", got)
	}
	if got := split[1].opt.env(); !slices.Contains(got, "KT_PLAIN=0") {
		t.Errorf("nostatx pass's environment %q", got)
	}
	for _, o := range []guestOptions{{nostatx: "-"}, {inject: "panic"}, {inject: "fail", suites: "kernel-tests"}} {
		if p := o.passes(); len(p) != 1 || p[0].opt != o || p[0].suffix != "" {
			t.Errorf("%+v split into %+v", o, p)
		}
	}
}

const nostatxLog = "@@kt kernel 6.1.0-57-amd64\n" +
	"@@kt probe nostatx begin\n" +
	`{"kernel_release":"6.1.0-57-amd64","statx_mnt_id":{"status":"no","detail":"ENOSYS"}}` + "\n" +
	"@@kt probe nostatx end\n" +
	"@@kt suite nostatx overlay begin\n" +
	"@@kt suite nostatx overlay pass 0 20\n" +
	"@@kt report nostatx incomplete no-mount-id\n" +
	"@@kt end\n"

// The two guests of one kernel make one column, failed if either failed.
func TestMerge(t *testing.T) {
	c := parseLog("6.1", strings.NewReader(goodLog))
	c.merge(parseLog("6.1-nostatx", strings.NewReader(nostatxLog)))
	if c.Failed() || c.Name != "6.1" {
		t.Fatalf("merged column %q failed: %q", c.Name, c.Problems)
	}
	if c.Cells["plain overlay"].Seconds != 12 || c.Cells["nostatx overlay"].Seconds != 20 {
		t.Errorf("cells %+v", c.Cells)
	}
	if c.Reports["plain"]["overlay-missing"] != "uuid=null" || c.Reports["nostatx"]["incomplete"] != "no-mount-id" {
		t.Errorf("reports %q", c.Reports)
	}
	if c.Features["plain"].StatxMountID.OK() != true || c.Features["nostatx"].StatxMountID.OK() {
		t.Errorf("features %+v", c.Features)
	}
	for name, log := range map[string]string{
		"nostatx guest died":   strings.Replace(nostatxLog, "@@kt end\n", "", 1),
		"nostatx suite failed": strings.Replace(nostatxLog, "overlay pass 0 20", "overlay fail 1 20", 1),
	} {
		c := parseLog("6.1", strings.NewReader(goodLog))
		c.merge(parseLog("6.1-nostatx", strings.NewReader(log)))
		if !c.Failed() || len(c.Tail) == 0 {
			t.Errorf("%s: merged column not failed (problems %q) or no log tail", name, c.Problems)
		}
		if wantEnded := name != "nostatx guest died"; c.Ended != wantEnded {
			t.Errorf("%s: end marker seen %v, want %v", name, c.Ended, wantEnded)
		}
	}
	c = parseLog("6.1", strings.NewReader(strings.Replace(goodLog, "@@kt end\r\n", "", 1)))
	c.merge(parseLog("6.1-nostatx", strings.NewReader(nostatxLog)))
	if !c.Failed() || c.Ended {
		t.Errorf("a plain guest that died is hidden by the nostatx guest: ended %v, problems %q", c.Ended, c.Problems)
	}
}

// Guests start longest first: by the last run's kept logs, else the plain
// passes before the nostatx ones.
func TestSchedule(t *testing.T) {
	cfg := config{cache: t.TempDir()}
	guests := func() []guestRun {
		return []guestRun{
			{name: "5.10"}, {name: "5.10-nostatx", opt: guestOptions{noPlain: true}}, {name: "6.1"}, {name: "6.12"},
		}
	}
	names := func(g []guestRun) []string {
		var s []string
		for _, x := range g {
			s = append(s, x.name)
		}
		return s
	}
	g := guests()
	schedule(g, cfg)
	if want := []string{"5.10", "6.1", "6.12", "5.10-nostatx"}; !slices.Equal(names(g), want) {
		t.Errorf("without logs: %q, want %q", names(g), want)
	}
	logs := filepath.Join(cfg.cache, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, secs := range map[string]string{"5.10": "700", "5.10-nostatx": "550", "6.1": "800", "6.12": "560"} {
		log := strings.Replace(goodLog, "overlay pass 0 12", "overlay pass 0 "+secs, 1)
		if err := os.WriteFile(filepath.Join(logs, name+".log"), []byte(log), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g = guests()
	schedule(g, cfg)
	if want := []string{"6.1", "5.10", "6.12", "5.10-nostatx"}; !slices.Equal(names(g), want) {
		t.Errorf("with logs: %q, want %q", names(g), want)
	}
}

// TestHostPlainLog: go test's summary lines become the host's plain cells,
// a failed or missing package a failed cell, the report its reports.
func TestHostPlainLog(t *testing.T) {
	const mod = "example.com/m"
	out := "=== RUN   TestX\n" +
		"ok  \texample.com/m\t12.6s\n" +
		"ok  \texample.com/m/cmd/tool\t101.2s\n" +
		"--- FAIL: TestY (0.01s)\n" +
		"FAIL\texample.com/m/overlay\t3.0s\n" +
		"FAIL\texample.com/m/probe [build failed]\n" +
		"ok  \texample.com/m/attest\t1.0s\n" +
		"ok  \texample.com/other/nsrun\t1.0s\n"
	suites := []string{"cmd-tool", "nsrun", "overlay", "probe", "root"}
	log := hostPlainLog(strings.NewReader(out), []byte("verify-exit 0\nincomplete -\n"), mod, suites)
	c := parseLog("host", strings.NewReader(string(log)+"@@kt end\n"))
	want := map[string]Cell{
		"plain root":     {Pass: true, Seconds: 13},
		"plain cmd-tool": {Pass: true, Seconds: 101},
		"plain overlay":  {Exit: 1, Seconds: 3},
		"plain probe":    {Exit: 1},
		"plain nsrun":    {Exit: 127}, // another module's nsrun is not this one's
	}
	if len(c.Cells) != len(want) {
		t.Errorf("cells %+v, want %+v", c.Cells, want)
	}
	for k, w := range want {
		if got := c.Cells[k]; got != w {
			t.Errorf("cell %q: %+v, want %+v", k, got, w)
		}
	}
	if c.Reports["plain"]["from"] != "go-test" || c.Reports["plain"]["verify-exit"] != "0" || c.Reports["plain"]["incomplete"] != "-" {
		t.Errorf("reports %q", c.Reports)
	}
	if !c.Failed() {
		t.Errorf("a column with failed go test packages is not failed")
	}
}

// TestInOrder: the guests start in the order schedule chose, at most jobs
// at once.
func TestInOrder(t *testing.T) {
	for _, jobs := range []int{1, 2} {
		var mu sync.Mutex
		var started []int
		running, most := 0, 0
		inOrder(30, jobs, func(i int) {
			mu.Lock()
			started = append(started, i)
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
		})
		if jobs == 1 && !slices.IsSorted(started) || len(started) != 30 {
			t.Errorf("jobs %d: started %v, want 0 to 29 in order", jobs, started)
		}
		if most > jobs {
			t.Errorf("jobs %d: %d ran at once", jobs, most)
		}
	}
}

// TestImageRelease: the release is read from a bzImage's setup header; a
// file without one is refused, naming it.
func TestImageRelease(t *testing.T) {
	img := make([]byte, 0x1000)
	copy(img[0x202:], "HdrS")
	img[0x20E], img[0x20F] = 0x00, 0x01 // the version string at 0x300
	copy(img[0x300:], "6.13.0-own (builder@host) #1 SMP PREEMPT_DYNAMIC\x00")
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "bzImage"), filepath.Join(dir, "notakernel")
	if err := os.WriteFile(good, img, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := imageRelease(good); err != nil || r != "6.13.0-own" {
		t.Errorf("imageRelease = %q, %v; want 6.13.0-own", r, err)
	}
	if _, err := imageRelease(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("imageRelease of a shell script: %v", err)
	}
	if x, err := ownKernel(good, "", dir); err != nil || x.Vmlinuz != good || x.Release != "6.13.0-own" || len(x.Modules) != 0 {
		t.Errorf("ownKernel without modules: %+v, %v", x, err)
	}
	if _, err := ownKernel(good, filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("ownKernel took a modules directory that does not exist")
	}
	if code := run([]string{"-modules", dir}); code != 64 {
		t.Errorf("-modules without -kernel: exit %d, want 64", code)
	}
	if code := run([]string{"-kernel", bad}); code != 64 {
		t.Errorf("-kernel of a shell script: exit %d, want 64", code)
	}
}
