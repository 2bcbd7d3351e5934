package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// cpioWriter writes a cpio archive in the "newc" format the kernel unpacks
// as an initramfs.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	err error
}

func newCPIO(w io.Writer) *cpioWriter { return &cpioWriter{w: bufio.NewWriter(w), ino: 1} }

// entry writes one header, the name and the data, each padded to 4 bytes.
func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	if c.err != nil {
		return
	}
	c.ino++
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func (c *cpioWriter) Dir(name string)                         { c.entry(name, modeDir|0o755, nil) }
func (c *cpioWriter) File(name string, perm uint32, b []byte) { c.entry(name, modeFile|perm, b) }
func (c *cpioWriter) Symlink(name, target string)             { c.entry(name, modeLink|0o777, []byte(target)) }

// Close writes the trailer and flushes.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}

// initScript is the guest's /init: it mounts the pseudo filesystems (a
// devpts for pseudo-terminals and the unified cgroup hierarchy, as a
// distribution's init would), brings the loopback interface up (tests
// serve the agent from 127.0.0.1), loads the modules, puts an ext4 scratch disk on /tmp, runs guest.sh and
// powers off. "kt.inject=panic" on the kernel command line crashes the
// kernel instead, to show that the harness reports it.
const initScript = `#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin HOME=/root TMPDIR=/tmp
# The test binaries collect garbage half as often: 6-10% less CPU time on
# the one emulated CPU, within the guest's memory.
export GOGC=200
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts || echo "@@kt devpts failed"
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "@@kt cgroup2 failed"
ip link set lo up || echo "@@kt loopback failed"
for m in $(cat /kt/modules); do
	insmod "/kt/mod/$m" || echo "@@kt module $m failed"
done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
if ! mount -t ext4 /dev/vda /tmp; then
	echo "@@kt scratch disk failed"
	ls /sys/block
	dmesg | tail -n 20
fi
chmod 1777 /tmp
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	kt.inject=panic) echo "@@kt injecting a kernel panic"; echo c >/proc/sysrq-trigger ;;
	kt.inject=fail) export LAYERSEAL_KT_INJECT_FAILURE=1 ;;
	kt.verbose=1) export KT_VERBOSE=1 ;;
	kt.plain=0) export KT_PLAIN=0 ;;
	kt.suites=*) v=${arg#kt.suites=}; export KT_SUITES="$(echo "$v" | tr , ' ')" ;;
	kt.nostatx=*) v=${arg#kt.nostatx=}; export KT_NOSTATX_SUITES="$(echo "$v" | tr , ' ')" ;;
	esac
done
sh /kt/guest.sh /kt
sync
umount /tmp
poweroff -f
`

// hostTools are programs the test agents need that busybox lacks or does
// differently (xattrs, ACLs, git for the seccomp workload): copied from the host
// with their libraries.
var hostTools = []string{"setfattr", "getfattr", "setfacl", "cp", "git"}

// buildInitramfs writes the guest's initramfs to path: busybox, the host
// tools and their libraries, the modules of x, and what build.sh made in
// binDir.
func buildInitramfs(path, busyboxPath, guestScript, binDir string, x Extracted) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	c := newCPIO(f)
	dirs := map[string]bool{}
	mkdirs := func(p string) {
		var parts []string
		for d := filepath.Dir(p); d != "." && d != "/"; d = filepath.Dir(d) {
			parts = append(parts, d)
		}
		slices.Reverse(parts)
		for _, d := range parts {
			if !dirs[d] {
				dirs[d] = true
				c.Dir(d)
			}
		}
	}
	file := func(name, src string, perm uint32) error {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		mkdirs(name)
		c.File(name, perm, b)
		return nil
	}
	for _, d := range []string{"bin", "usr/bin", "proc", "sys", "dev", "tmp", "root", "etc", "kt/mod"} {
		mkdirs(d + "/x")
	}
	if err := file("bin/busybox", busyboxPath, 0o755); err != nil {
		return err
	}
	c.Symlink("bin/sh", "busybox")
	c.File("init", 0o755, []byte(initScript))
	c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	if err := file("kt/guest.sh", guestScript, 0o755); err != nil {
		return err
	}
	var names []string
	for _, m := range x.Modules {
		names = append(names, filepath.Base(m))
		if err := file("kt/mod/"+filepath.Base(m), m, 0o644); err != nil {
			return err
		}
	}
	c.File("kt/modules", 0o644, []byte(strings.Join(names, "\n")+"\n"))
	err = filepath.Walk(binDir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(binDir, p)
		return file("kt/"+rel, p, 0o755)
	})
	if err != nil {
		return err
	}
	libs := map[string]bool{}
	for _, t := range hostTools {
		p, err := exec.LookPath(t)
		if err != nil {
			return fmt.Errorf("host tool %q for the guest: %w", t, err)
		}
		if err := file("usr/bin/"+t, p, 0o755); err != nil {
			return err
		}
		deps, err := sharedLibs(p)
		if err != nil {
			return err
		}
		for _, l := range deps {
			libs[l] = true
		}
	}
	for _, l := range slices.Sorted(func(yield func(string) bool) {
		for l := range libs {
			if !yield(l) {
				return
			}
		}
	}) {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return err
		}
		if err := file(strings.TrimPrefix(l, "/"), real, 0o755); err != nil {
			return err
		}
	}
	return c.Close()
}

// sharedLibs lists the shared libraries (and the loader) of an ELF
// program, as ldd resolves them.
func sharedLibs(prog string) ([]string, error) {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		// A static program has none.
		return nil, nil
	}
	var libs []string
	for line := range strings.SplitSeq(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		}
	}
	return libs, nil
}
