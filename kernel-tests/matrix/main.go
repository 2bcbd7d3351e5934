// Command matrix runs layerseal's privileged test suites on several Linux
// kernels and prints a matrix of kernel × suite with the features the
// probe found on each. kernel-tests/run is its front door:
//
//	kernel-tests/run [-kernels 5.10,6.1,6.12] [-host=true] [-host-plain FILE] [-suites S,...] [-nostatx oldest|all|none] [-markdown]
//	kernel-tests/run -self-check
//
// For each kernel it fetches the Debian package with apt-get download into
// kernel-tests/cache (a private apt configuration: the system's sources are
// not touched), builds an initramfs holding busybox, the overlay module and
// the statically built test binaries, and boots it with qemu (TCG) with a
// serial console. The guest runs kernel-tests/guest.sh; the host runs the
// same script directly. It exits 1 when any cell failed or any guest died
// before its end marker (printing the tail of that guest's log), 64 on a
// usage error.
//
// -self-check proves the harness can fail: it boots one kernel with a
// deliberately failing test injected and once with a kernel panic
// injected, and succeeds only if both are reported as failures.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

type config struct {
	repo, cache string
	kernels     []Kernel
	host        bool
	markdown    bool
	jobs        int
	timeout     time.Duration
	memory      string
	cpu         string // qemu's -cpu model
	verbose     bool
	testV       bool   // the suites run with -test.v
	suites      string // comma-separated suites; empty for all
	nostatx     string // where the suites run again without statx: oldest, all or none
	logPrefix   string // before each kept log's name: the self-check's do not replace the matrix's
	hostPlain   string // go test's output that stands for the host's plain pass; empty to run it
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("kernel-tests/run", flag.ContinueOnError)
	kernels := fs.String("kernels", "5.10,6.1,6.12", "comma-separated kernel series to boot (of "+seriesList()+"); empty for none")
	image := fs.String("kernel", "", "also boot this kernel image of one's own (an x86 bzImage), in the column \"own\"")
	modules := fs.String("modules", "", "the -kernel image's modules directory (lib/modules/RELEASE), where overlay, virtio_blk and ext4 are modules; empty when they are built in")
	host := fs.Bool("host", true, "run the suites on the host kernel too")
	markdown := fs.Bool("markdown", false, "print the matrix as docs/KERNELS.md")
	selfCheck := fs.Bool("self-check", false, "check that an injected test failure and an injected kernel panic fail the matrix")
	cpu := fs.String("cpu", "qemu64", "the CPU model qemu emulates (qemu-system-x86_64 -cpu help lists them); qemu64, the plainest, costs a quarter less host CPU than max")
	jobs := fs.Int("j", runtime.NumCPU(), "guests booted at once")
	timeout := fs.Duration("timeout", 45*time.Minute, "time limit of one guest")
	verbose := fs.Bool("v", false, "copy guest logs to stderr as they arrive")
	testV := fs.Bool("test-v", false, "run the suites with -test.v: each test's name and time in the kept logs")
	suites := fs.String("suites", "", "comma-separated suites (test packages, e.g. nsrun,overlay) to run; empty for all")
	nostatx := fs.String("nostatx", "oldest", "where the suites run again with statx refused: oldest (the host and the oldest kernel booted), all, or none")
	hostPlain := fs.String("host-plain", "", "take the host's plain pass from this file, the output of go test run as root on the module's packages (FILE.report: the session test's report), instead of running the suites again")
	fromLogs := fs.Bool("from-logs", false, "run nothing: print the matrix of the logs the last run kept in kernel-tests/cache/logs")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return 64
	}
	repo, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernel-tests:", err)
		return 1
	}
	cfg := config{repo: repo, cache: filepath.Join(repo, "kernel-tests", "cache"), host: *host, markdown: *markdown,
		jobs: max(*jobs, 1), timeout: *timeout, memory: "1G", cpu: *cpu, verbose: *verbose, testV: *testV, suites: *suites, nostatx: *nostatx, hostPlain: *hostPlain}
	if !slices.Contains([]string{"oldest", "all", "none"}, cfg.nostatx) {
		fmt.Fprintf(os.Stderr, "kernel-tests: -nostatx %q: want oldest, all or none\n", cfg.nostatx)
		return 64
	}
	for s := range strings.SplitSeq(*kernels, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		i := slices.IndexFunc(Kernels, func(k Kernel) bool { return k.Series == s })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "kernel-tests: unknown kernel series %q (known: %s)\n", s, seriesList())
			return 64
		}
		cfg.kernels = append(cfg.kernels, Kernels[i])
	}
	if *modules != "" && *image == "" {
		fmt.Fprintln(os.Stderr, "kernel-tests: -modules is for the -kernel image's modules: give -kernel too")
		return 64
	}
	if *image != "" {
		if _, err := imageRelease(*image); err != nil {
			fmt.Fprintln(os.Stderr, "kernel-tests:", err)
			return 64
		}
		cfg.kernels = append(cfg.kernels, Kernel{Series: "own", Image: *image, Modules: *modules})
	}
	if os.Geteuid() != 0 && !*fromLogs {
		fmt.Fprintln(os.Stderr, "kernel-tests: the privileged suites need root")
		return 1
	}
	if *selfCheck {
		return selfCheckRun(cfg)
	}
	start := time.Now()
	var cols []*Column
	if *fromLogs {
		cols, err = readLogs(cfg)
	} else {
		cols, err = matrix(cfg, variant{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernel-tests:", err)
		return 1
	}
	elapsed := time.Since(start).Round(time.Second)
	if cfg.markdown {
		writeMarkdown(os.Stdout, cols)
	} else {
		writeText(os.Stdout, cols)
		if !*fromLogs {
			fmt.Printf("\nwall time: %s\n", elapsed)
		}
	}
	failed := false
	for _, c := range cols {
		if c.Failed() {
			failed = true
			writeFailure(os.Stderr, c)
		}
	}
	if failed {
		return 1
	}
	return 0
}

func seriesList() string {
	var s []string
	for _, k := range Kernels {
		s = append(s, k.Series)
	}
	return strings.Join(s, ",")
}

// modulePath is the module's path, which prefixes its packages' import paths.
func modulePath() (string, error) {
	out, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		return "", fmt.Errorf("find the module's path with go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root with go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// guestOptions change what a guest runs (or guest.sh on the host).
type guestOptions struct {
	inject        string // "fail" or "panic"
	verbose       bool   // -test.v
	noPlain       bool   // only the nostatx pass (see passes)
	noPlainSuites bool   // the plain pass's probe, not its suites (the host's, with -host-plain)
	suites        string // comma-separated suites (default: all)
	nostatx       string // comma-separated nostatx suites; "-" for none
}

// guestOptions are what the guest of kernel k (the zero Kernel for the
// host) runs: opt where it says, else cfg's suites, and the nostatx
// suites again only where cfg.nostatx asks for them. Only the oldest
// kernel by default: the filter stands in for kernels older than any
// booted, and repeating it on every newer kernel tests the same code.
func (cfg config) guestOptions(opt guestOptions, k Kernel) guestOptions {
	if opt.suites == "" {
		opt.suites = cfg.suites
	}
	opt.verbose = opt.verbose || cfg.testV
	age := func(k Kernel) int {
		return slices.IndexFunc(Kernels, func(o Kernel) bool { return o.Series == k.Series })
	}
	oldest := len(cfg.kernels) > 0 && k == slices.MinFunc(cfg.kernels, func(a, b Kernel) int { return age(a) - age(b) })
	if opt.nostatx == "" && (cfg.nostatx == "none" || cfg.nostatx == "oldest" && k != (Kernel{}) && !oldest) {
		opt.nostatx = "-"
	}
	return opt
}

// env is o for guest.sh run on the host: the same settings as cmdline.
func (o guestOptions) env() []string {
	var s []string
	if o.inject == "fail" {
		s = append(s, "LAYERSEAL_KT_INJECT_FAILURE=1")
	}
	if o.verbose {
		s = append(s, "KT_VERBOSE=1")
	}
	if o.noPlain {
		s = append(s, "KT_PLAIN=0")
	} else if o.noPlainSuites {
		s = append(s, "KT_PLAIN=probe")
	}
	if o.suites != "" {
		s = append(s, "KT_SUITES="+strings.ReplaceAll(o.suites, ",", " "))
	}
	if o.nostatx != "" {
		s = append(s, "KT_NOSTATX_SUITES="+strings.ReplaceAll(strings.Trim(o.nostatx, "-"), ",", " "))
	}
	return s
}

func (o guestOptions) cmdline() string {
	var s []string
	if o.inject != "" {
		s = append(s, "kt.inject="+o.inject)
	}
	if o.verbose {
		s = append(s, "kt.verbose=1")
	}
	if o.noPlain {
		s = append(s, "kt.plain=0")
	}
	if o.suites != "" {
		s = append(s, "kt.suites="+o.suites)
	}
	if o.nostatx != "" {
		s = append(s, "kt.nostatx="+strings.Trim(o.nostatx, "-"))
	}
	return strings.Join(s, " ")
}

// matrix builds everything and runs every column, guests in parallel.
// variant is a set of guest options booted on every kernel; its label
// (empty for the matrix itself) sets its guests and columns apart.
type variant struct {
	label string
	opt   guestOptions
}

// matrix builds everything once and runs every column of every variant,
// guests in parallel, the host (with the first variant's options) too.
// The columns come by variant, then kernel.
func matrix(cfg config, variants ...variant) ([]*Column, error) {
	// A run of the host alone builds elsewhere: scripts/test starts one
	// while another run's guests are booting.
	binDir := filepath.Join(cfg.cache, "bin")
	if len(cfg.kernels) == 0 {
		binDir = filepath.Join(cfg.cache, "bin-host")
	}
	os.RemoveAll(binDir)
	logf("building the test binaries")
	build := exec.Command(filepath.Join(cfg.repo, "kernel-tests", "build.sh"), binDir)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("kernel-tests/build.sh: %w", err)
	}
	var guests []guestRun
	if len(cfg.kernels) > 0 {
		a, err := newApt(cfg.cache)
		if err != nil {
			return nil, err
		}
		bb, err := busybox(a, cfg.cache)
		if err != nil {
			return nil, err
		}
		for _, k := range cfg.kernels {
			x, err := fetchKernel(a, cfg, k)
			if err != nil {
				return nil, fmt.Errorf("kernel %s: %w", k.Series, err)
			}
			initrd := filepath.Join(cfg.cache, "initramfs-"+k.Series+".cpio")
			if err := buildInitramfs(initrd, bb, filepath.Join(cfg.repo, "kernel-tests", "guest.sh"), binDir, x); err != nil {
				return nil, fmt.Errorf("kernel %s: initramfs: %w", k.Series, err)
			}
			for _, v := range variants {
				col := k.Series + labelSuffix(v.label)
				for _, p := range cfg.guestOptions(v.opt, k).passes() {
					guests = append(guests, guestRun{kernel: col, name: col + p.suffix, x: x, initrd: initrd, opt: p.opt})
				}
			}
		}
	}
	for _, k := range cfg.kernels {
		// A kept log of a nostatx guest of an earlier run must not be
		// read as this run's.
		os.Remove(filepath.Join(cfg.cache, "logs", cfg.logPrefix+k.Series+"-nostatx.log"))
	}
	schedule(guests, cfg)
	for _, g := range guests {
		logf("guest %s: queued", g.name)
	}
	parts := make([]*Column, len(guests))
	var wg sync.WaitGroup
	wg.Go(func() {
		inOrder(len(guests), cfg.jobs, func(i int) {
			g := guests[i]
			parts[i] = bootGuest(cfg, g.name, g.x, g.initrd, g.opt)
		})
	})
	var hostCol *Column
	if cfg.host {
		hostCol = runHost(cfg, binDir, cfg.guestOptions(variants[0].opt, Kernel{}))
	}
	wg.Wait()
	var cols []*Column
	if hostCol != nil {
		cols = append(cols, hostCol)
	}
	for _, v := range variants {
		for _, k := range cfg.kernels {
			name := k.Series + labelSuffix(v.label)
			var col *Column
			for i, g := range guests {
				if g.kernel != name {
					continue
				}
				if col == nil {
					col = parts[i]
					col.Name = name
				} else {
					col.merge(parts[i])
				}
			}
			if col != nil {
				cols = append(cols, col)
			}
		}
	}
	return cols, nil
}

func labelSuffix(label string) string {
	if label == "" {
		return ""
	}
	return "-" + label
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kernel-tests: "+format+"\n", a...)
}

// runHost runs guest.sh on the host kernel. With cfg.hostPlain its plain
// pass is read from go test's output and guest.sh runs only the probe and
// the nostatx pass.
func runHost(cfg config, binDir string, opt guestOptions) *Column {
	start := time.Now()
	var log bytes.Buffer
	if cfg.hostPlain != "" {
		plain, err := readHostPlain(cfg, binDir)
		if err != nil {
			col := parseLog("host", strings.NewReader(""))
			col.Problems = append(col.Problems, err.Error())
			return col
		}
		logf("host: the plain pass is go test's in %s; running the probe and the nostatx pass", cfg.hostPlain)
		log.Write(plain)
		opt.noPlainSuites = true
	} else {
		logf("host: running the suites")
	}
	cmd := exec.Command("sh", filepath.Join(cfg.repo, "kernel-tests", "guest.sh"), binDir)
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.Env = append(os.Environ(), opt.env()...)
	err := cmd.Run()
	saveLog(cfg, "host", log.Bytes())
	col := parseLog("host", &log)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		col.Problems = append(col.Problems, "guest.sh: "+err.Error())
	}
	logf("host: done in %s", time.Since(start).Round(time.Second))
	return col
}

// bootGuest boots one kernel with the initramfs and a fresh ext4 scratch
// disk and parses what its serial console printed. qemu's own exit status
// says nothing about the guest, so only the log decides.
func bootGuest(cfg config, name string, x Extracted, initrd string, opt guestOptions) *Column {
	logf("guest %s (%s): booting", name, x.Release)
	start := time.Now()
	fail := func(err error) *Column {
		c := parseLog(name, strings.NewReader(""))
		c.Problems = append(c.Problems, err.Error())
		return c
	}
	tmp, err := os.MkdirTemp(cfg.cache, "guest-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	disk := filepath.Join(tmp, "scratch.img")
	if err := makeScratch(disk); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	// "quiet" would raise the console log level again: only emergencies
	// (panics) and alerts reach the console.
	appendLine := "console=ttyS0 panic=-1 oops=panic loglevel=2 " + opt.cmdline()
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64",
		"-accel", "tcg", "-cpu", cfg.cpu, "-m", cfg.memory, "-smp", "1",
		"-nographic", "-no-reboot", "-nic", "none",
		"-kernel", x.Vmlinuz, "-initrd", initrd, "-append", strings.TrimSpace(appendLine),
		// The scratch disk is thrown away: its flushes need not reach the host's disk.
		"-drive", "file="+disk+",format=raw,if=virtio,cache=unsafe")
	var log bytes.Buffer
	var out io.Writer = &log
	if cfg.verbose {
		out = io.MultiWriter(&log, prefixWriter{name})
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	saveLog(cfg, name, log.Bytes())
	col := parseLog(name, bytes.NewReader(log.Bytes()))
	if ctx.Err() != nil {
		col.Problems = append(col.Problems, fmt.Sprintf("timed out after %s", cfg.timeout))
	} else if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			col.Problems = append(col.Problems, "qemu: "+err.Error())
		}
	}
	if col.Failed() && len(col.Tail) == 0 {
		col.Tail = lastLines(log.String(), tailLines)
	}
	logf("guest %s: done in %s", name, time.Since(start).Round(time.Second))
	return col
}

// readLogs parses the logs saveLog kept for the host and cfg.kernels.
func readLogs(cfg config) ([]*Column, error) {
	var names []string
	if cfg.host {
		names = append(names, "host")
	}
	for _, k := range cfg.kernels {
		names = append(names, k.Series)
	}
	var cols []*Column
	for _, n := range names {
		f, err := os.Open(filepath.Join(cfg.cache, "logs", n+".log"))
		if err != nil {
			return nil, err
		}
		c := parseLog(n, f)
		f.Close()
		// The nostatx pass of a kernel booted in a guest of its own.
		if f, err := os.Open(filepath.Join(cfg.cache, "logs", n+"-nostatx.log")); err == nil {
			c.merge(parseLog(n+"-nostatx", f))
			f.Close()
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// saveLog keeps a column's whole log in cache/logs/NAME.log (the
// self-check's in self-check-NAME.log).
func saveLog(cfg config, name string, b []byte) {
	dir := filepath.Join(cfg.cache, "logs")
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, cfg.logPrefix+name+".log"), b, 0o644)
	}
	if err != nil {
		logf("%s: keep log: %v", name, err)
	}
}

func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[max(0, len(lines)-n):]
}

// prefixWriter copies a guest's console to stderr, each write prefixed
// with the kernel's name.
type prefixWriter struct{ name string }

func (p prefixWriter) Write(b []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Fprintf(os.Stderr, "[%s] %s\n", p.name, strings.TrimRight(line, "\r"))
	}
	return len(b), nil
}

// makeScratch makes a sparse ext4 image for the guest's /tmp with only the
// features every kernel in the matrix mounts read-write.
func makeScratch(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(4 << 30); err != nil {
		f.Close()
		return err
	}
	f.Close()
	out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4",
		"-O", "none,has_journal,ext_attr,dir_index,filetype,extent,flex_bg,sparse_super,large_file,huge_file,dir_nlink,extra_isize",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mke2fs %q: %w: %s", path, err, out)
	}
	return nil
}

// selfCheckRun boots the first kernel asked for (or 6.1) twice, side by
// side: once with a failing test injected, once with a kernel panic
// injected. Each must come out as a failed column, for the reason injected.
func selfCheckRun(cfg config) int {
	k := Kernels[1]
	if len(cfg.kernels) > 0 {
		k = cfg.kernels[0]
	}
	cfg.kernels, cfg.host, cfg.logPrefix = []Kernel{k}, false, "self-check-"
	checks := []struct {
		what string
		v    variant
		want func(*Column) string
	}{
		{"injected test failure", variant{"fail", guestOptions{inject: "fail", suites: "kernel-tests", nostatx: "-"}}, func(c *Column) string {
			cell, ran := c.Cells["plain kernel-tests"]
			switch {
			case !c.Ended:
				return "the guest did not finish"
			case !ran:
				return "the kernel-tests suite did not run"
			case cell.Pass:
				return "the suite with the injected failure passed"
			case !c.Failed():
				return "the column is not failed"
			case !slices.ContainsFunc(c.Tail, func(l string) bool { return strings.Contains(l, "failure injected") }):
				return "the suite failed, but not with the injected failure"
			}
			return ""
		}},
		{"injected kernel panic", variant{"panic", guestOptions{inject: "panic"}}, func(c *Column) string {
			if !c.Failed() || c.Ended {
				return "a guest whose kernel panicked is not reported as failed"
			}
			if !slices.ContainsFunc(c.Problems, func(p string) bool { return strings.HasPrefix(p, "kernel panic") }) {
				return "the panic is not named among the problems"
			}
			return ""
		}},
	}
	// One build, both guests side by side.
	var vs []variant
	for _, c := range checks {
		vs = append(vs, c.v)
	}
	cols, err := matrix(cfg, vs...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernel-tests:", err)
		return 1
	}
	if len(cols) != len(checks) {
		fmt.Fprintf(os.Stderr, "kernel-tests: self-check: %d columns for %d checks\n", len(cols), len(checks))
		return 1
	}
	ok := true
	for i, ch := range checks {
		c := cols[i]
		if problem := ch.want(c); problem != "" {
			fmt.Printf("self-check %s: FAILED: %s\n", ch.what, problem)
			writeFailure(os.Stdout, c)
			ok = false
			continue
		}
		fmt.Printf("self-check %s: ok, the harness reported the failure:\n", ch.what)
		writeFailure(os.Stdout, c)
	}
	if !ok {
		return 1
	}
	return 0
}

// fetchKernel is the image and modules of kernel k: downloaded and
// extracted from Debian's package, or one's own (-kernel).
func fetchKernel(a *apt, cfg config, k Kernel) (Extracted, error) {
	if k.Image != "" {
		logf("kernel %s: %s", k.Series, k.Image)
		return ownKernel(k.Image, k.Modules, filepath.Join(cfg.cache, "kernels", "own"))
	}
	logf("kernel %s: fetching", k.Series)
	deb, err := a.download(cfg.cache, k.Package)
	if err != nil {
		return Extracted{}, err
	}
	return extract(deb, filepath.Join(cfg.cache, "kernels", strings.TrimSuffix(filepath.Base(deb), ".deb")))
}
