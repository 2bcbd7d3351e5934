package seccomp

import (
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// call is a struct seccomp_data.
type call struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

// run runs prog over c in x/net/bpf's interpreter, an implementation
// independent of the compiler. The interpreter loads words big-endian, so
// each word of seccomp_data is stored big-endian at the offset it has in
// the kernel's (little-endian) layout.
func run(t *testing.T, prog Program, c call) uint32 {
	t.Helper()
	vm, err := bpf.NewVM(prog.Instructions())
	if err != nil {
		t.Fatalf("program rejected by the interpreter: %v", err)
	}
	in := make([]byte, 64)
	binary.BigEndian.PutUint32(in[offNr:], c.nr)
	binary.BigEndian.PutUint32(in[offArch:], c.arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(in[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(in[offArgs+8*i+4:], uint32(a>>32))
	}
	out, err := vm.Run(in)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return uint32(out)
}

func nr(t *testing.T, a Arch, name string) uint32 {
	t.Helper()
	n, ok := a.Syscall(name)
	if !ok {
		t.Fatalf("%s has no system call %q", a.Name, name)
	}
	return n
}

var (
	allow  = uint32(retAllow)
	eperm  = uint32(retErrno | uint32(unix.EPERM))
	enosys = uint32(retErrno | uint32(unix.ENOSYS))
	kill   = uint32(retKillProcess)
)

// defaultCaps is Docker's default capability set: layerseal.DefaultCapabilities
// with CAP_MKNOD and CAP_NET_RAW, for which the filter is the same.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func compileDefault(t *testing.T, caps []string) (Program, Arch) {
	t.Helper()
	a, err := Native()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Default(caps)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) > maxInstructions {
		t.Fatalf("program of %d instructions", len(p))
	}
	return p, a
}

func TestDefaultProgram(t *testing.T) {
	p, a := compileDefault(t, defaultCaps)
	t.Logf("%d instructions", len(p))
	const cloneNewNS = unix.CLONE_NEWNS
	forkFlags := uint64(unix.CLONE_CHILD_CLEARTID | unix.CLONE_CHILD_SETTID | uint64(unix.SIGCHLD))
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM)
	cases := []struct {
		name string
		args [6]uint64
		want uint32
	}{
		{"read", [6]uint64{}, allow},
		{"write", [6]uint64{}, allow},
		{"execve", [6]uint64{}, allow},
		{"openat", [6]uint64{}, allow},
		{"exit_group", [6]uint64{}, allow},
		{"ioctl", [6]uint64{0, unix.TCGETS}, allow},
		{"ioctl", [6]uint64{0, unix.TIOCSCTTY}, allow},
		{"ioctl", [6]uint64{0, unix.TIOCSTI}, eperm},
		{"ioctl", [6]uint64{0, unix.TIOCLINUX}, eperm},
		// The kernel reads the request as 32 bits: high bits set change nothing.
		{"ioctl", [6]uint64{0, 0xdead_beef_0000_0000 | unix.TIOCSTI}, eperm},
		{"ioctl", [6]uint64{0, 0x1_0000_0000 | unix.TCGETS}, allow},
		{"clone", [6]uint64{forkFlags}, allow},
		{"clone", [6]uint64{threadFlags}, allow},
		{"clone", [6]uint64{forkFlags | cloneNewNS}, eperm},
		{"clone", [6]uint64{unix.CLONE_NEWUSER}, eperm},
		{"clone", [6]uint64{unix.CLONE_NEWNET | unix.CLONE_NEWPID}, eperm},
		{"clone3", [6]uint64{}, enosys},
		{"unshare", [6]uint64{unix.CLONE_NEWNS}, eperm},
		{"unshare", [6]uint64{unix.CLONE_NEWUSER}, eperm},
		{"setns", [6]uint64{}, eperm},
		{"mount", [6]uint64{}, eperm},
		{"umount2", [6]uint64{}, eperm},
		{"pivot_root", [6]uint64{}, eperm},
		{"move_mount", [6]uint64{}, eperm},
		{"open_tree", [6]uint64{}, eperm},
		{"fsopen", [6]uint64{}, eperm},
		{"fsmount", [6]uint64{}, eperm},
		{"mount_setattr", [6]uint64{}, eperm},
		{"keyctl", [6]uint64{}, eperm},
		{"add_key", [6]uint64{}, eperm},
		{"request_key", [6]uint64{}, eperm},
		{"bpf", [6]uint64{}, eperm},
		{"perf_event_open", [6]uint64{}, eperm},
		{"kexec_load", [6]uint64{}, eperm},
		{"kexec_file_load", [6]uint64{}, eperm},
		{"init_module", [6]uint64{}, eperm},
		{"finit_module", [6]uint64{}, eperm},
		{"delete_module", [6]uint64{}, eperm},
		{"open_by_handle_at", [6]uint64{}, eperm},
		{"swapon", [6]uint64{}, eperm},
		{"swapoff", [6]uint64{}, eperm},
		{"reboot", [6]uint64{}, eperm},
		{"settimeofday", [6]uint64{}, eperm},
		{"clock_settime", [6]uint64{}, eperm},
		{"acct", [6]uint64{}, eperm},
		{"userfaultfd", [6]uint64{}, eperm},
		{"lookup_dcookie", [6]uint64{}, eperm},
		{"quotactl", [6]uint64{}, eperm},
		{"ptrace", [6]uint64{}, allow}, // Docker allows it from kernel 4.8
		{"personality", [6]uint64{0}, allow},
		{"personality", [6]uint64{0xffffffff}, allow},
		{"personality", [6]uint64{0x0040000}, eperm}, // ADDR_NO_RANDOMIZE
		{"socket", [6]uint64{unix.AF_UNIX}, allow},
		{"socket", [6]uint64{unix.AF_INET6}, allow},
		{"chroot", [6]uint64{}, allow}, // CAP_SYS_CHROOT is in the set
	}
	if a.Name == "amd64" {
		cases = append(cases, []struct {
			name string
			args [6]uint64
			want uint32
		}{
			{"iopl", [6]uint64{}, eperm}, {"ioperm", [6]uint64{}, eperm}, {"_sysctl", [6]uint64{}, eperm},
			{"uselib", [6]uint64{}, eperm}, {"nfsservctl", [6]uint64{}, eperm}, {"arch_prctl", [6]uint64{}, allow},
		}...)
	}
	for _, c := range cases {
		if got := run(t, p, call{nr: nr(t, a, c.name), arch: a.Audit, args: c.args}); got != c.want {
			t.Errorf("%s%x: got %#x, want %#x", c.name, c.args[:2], got, c.want)
		}
	}
}

func TestForeignABI(t *testing.T) {
	p, a := compileDefault(t, defaultCaps)
	read := nr(t, a, "read")
	for _, arch := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM, unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64} {
		if arch == a.Audit {
			continue
		}
		if got := run(t, p, call{nr: read, arch: arch}); got != kill {
			t.Errorf("read through audit arch %#x: got %#x, want kill", arch, got)
		}
	}
	if a.X32Bit != 0 {
		if got := run(t, p, call{nr: a.X32Bit | read, arch: a.Audit}); got != kill {
			t.Errorf("x32 read: got %#x, want kill", got)
		}
	}
}

func TestAboveKnownNumbers(t *testing.T) {
	p, a := compileDefault(t, defaultCaps)
	prof, err := Profile(defaultCaps)
	if err != nil {
		t.Fatal(err)
	}
	var max uint32
	for _, r := range prof.Syscalls {
		for _, n := range r.Names {
			if v, ok := a.Syscall(n); ok && v > max {
				max = v
			}
		}
	}
	for _, n := range []uint32{max + 1, max + 100, 0x3fffffff} {
		if got := run(t, p, call{nr: n, arch: a.Audit}); got != enosys {
			t.Errorf("call %d above %d: got %#x, want ENOSYS", n, max, got)
		}
	}
}

// Every number gives the answer the profile's rules give, read straight
// from the profile: the binary search misses no range.
func TestEveryNumber(t *testing.T) {
	for _, caps := range [][]string{defaultCaps, nil, {"CAP_SYS_ADMIN"}} {
		p, a := compileDefault(t, caps)
		prof, err := Profile(caps)
		if err != nil {
			t.Fatal(err)
		}
		want := map[uint32]uint32{}
		for _, r := range prof.Syscalls {
			if len(r.Args) > 0 {
				continue
			}
			for _, n := range r.Names {
				v, ok := a.Syscall(n)
				if !ok {
					continue
				}
				ret, _ := action(r.Action, r.ErrnoRet)
				if old, seen := want[v]; !seen || old == allow {
					want[v] = ret
				}
			}
		}
		var max uint32
		for v := range want {
			max = maxOf(max, v)
		}
		conditional := map[string]bool{"ioctl": true, "clone": true, "socket": true, "personality": true}
		for name, v := range a.syscalls {
			if conditional[name] {
				continue
			}
			w, ok := want[v]
			if !ok {
				w = eperm
			}
			if v > max {
				w = enosys // above every number the profile names
			}
			if got := run(t, p, call{nr: v, arch: a.Audit}); got != w {
				t.Errorf("caps %q: %s (%d): got %#x, want %#x", caps, name, v, got, w)
			}
		}
	}
}

func TestCapabilitiesWiden(t *testing.T) {
	p, a := compileDefault(t, []string{"CAP_SYS_ADMIN"})
	for _, c := range []struct {
		name string
		args [6]uint64
		want uint32
	}{
		{"mount", [6]uint64{}, allow},
		{"unshare", [6]uint64{unix.CLONE_NEWNS}, allow},
		{"clone", [6]uint64{unix.CLONE_NEWNS}, allow},
		{"clone3", [6]uint64{}, allow},
		{"ioctl", [6]uint64{0, unix.TIOCSTI}, eperm}, // layerseal's addition holds whatever the capabilities
		{"kexec_load", [6]uint64{}, eperm},
	} {
		if got := run(t, p, call{nr: nr(t, a, c.name), arch: a.Audit, args: c.args}); got != c.want {
			t.Errorf("with CAP_SYS_ADMIN, %s: got %#x, want %#x", c.name, got, c.want)
		}
	}
}

// The operators compare 64-bit values, high words included.
func TestOperators(t *testing.T) {
	a := ARM64
	read := nr(t, a, "read")
	const v = 0x1_0000_0005
	vals := []uint64{0, 4, 5, 6, v - 1, v, v + 1, 0x2_0000_0000, 0x0_ffff_ffff, ^uint64(0)}
	ops := map[specs.LinuxSeccompOperator]func(x uint64) bool{
		specs.OpEqualTo: func(x uint64) bool { return x == v }, specs.OpNotEqual: func(x uint64) bool { return x != v },
		specs.OpLessThan: func(x uint64) bool { return x < v }, specs.OpLessEqual: func(x uint64) bool { return x <= v },
		specs.OpGreaterThan: func(x uint64) bool { return x > v }, specs.OpGreaterEqual: func(x uint64) bool { return x >= v },
	}
	for op, holds := range ops {
		prof := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{
			{Names: []string{"read"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 2, Value: v, Op: op}}},
		}}
		p, err := Compile(prof, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range vals {
			want := eperm
			if holds(x) {
				want = allow
			}
			if got := run(t, p, call{nr: read, arch: a.Audit, args: [6]uint64{2: x}}); got != want {
				t.Errorf("%s %#x vs %#x: got %#x, want %#x", op, x, uint64(v), got, want)
			}
		}
	}
	// Masked equality, the high word masked too; and two conditions ANDed.
	prof := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read"}, Action: specs.ActKillProcess, Args: []specs.LinuxSeccompArg{
			{Index: 0, Value: 0xf_0000_00f0, ValueTwo: 0x1_0000_0020, Op: specs.OpMaskedEqual},
			{Index: 5, Value: 7, Op: specs.OpEqualTo},
		}},
	}}
	p, err := Compile(prof, a)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a0, a5 uint64
		want   uint32
	}{
		{0x1_0000_0020, 7, kill}, {0x1_ffff_ff2f, 7, kill}, {0x3_0000_0020, 7, allow},
		{0x1_0000_0030, 7, allow}, {0x1_0000_0020, 8, allow}, {0x20, 7, allow},
	} {
		if got := run(t, p, call{nr: read, arch: a.Audit, args: [6]uint64{0: c.a0, 5: c.a5}}); got != c.want {
			t.Errorf("masked %#x, %d: got %#x, want %#x", c.a0, c.a5, got, c.want)
		}
	}
	// A denylist: other numbers get the default, not ENOSYS.
	if got := run(t, p, call{nr: 4000, arch: a.Audit}); got != allow {
		t.Errorf("number 4000 in a denylist: got %#x, want allow", got)
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, prof := range []*specs.LinuxSeccomp{
		{DefaultAction: specs.ActNotify},
		{DefaultAction: specs.ActAllow, Flags: []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog}},
		{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActTrace}}},
		{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActErrno,
			Args: []specs.LinuxSeccompArg{{Index: 0, Op: "SCMP_CMP_SOMETHING"}}}}},
	} {
		if _, err := Compile(prof, AMD64); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%+v: got %v, want ErrUnsupported", prof, err)
		}
	}
	prof := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActErrno,
		Args: []specs.LinuxSeccompArg{{Index: 6, Op: specs.OpEqualTo}}}}}
	if _, err := Compile(prof, AMD64); err == nil {
		t.Error("argument index 6 compiled")
	}
}

// Compiling is deterministic, and Bytes round-trips.
func TestDeterministic(t *testing.T) {
	p1, _ := compileDefault(t, defaultCaps)
	p2, _ := compileDefault(t, slices.Clone(defaultCaps))
	if !slices.Equal(p1.Bytes(), p2.Bytes()) {
		t.Fatal("two compilations differ")
	}
	back, err := ParseProgram(p1.Bytes())
	if err != nil || !slices.Equal(back, p1) {
		t.Fatalf("ParseProgram: %v", err)
	}
	p3, _ := compileDefault(t, append(slices.Clone(defaultCaps), "CAP_SYS_ADMIN"))
	if slices.Equal(p1.SHA256(), p3.SHA256()) {
		t.Fatal("CAP_SYS_ADMIN does not change the program")
	}
}

// Names of the default profile the amd64 table does not know: each must be
// a call amd64 does not have (32-bit, time64 and other architectures'
// calls). A name missing here that amd64 has would be refused silently.
func TestProfileNamesUnknownToAMD64(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the profile is resolved for amd64 only on amd64")
	}
	prof, err := Profile(nil)
	if err != nil {
		t.Fatal(err)
	}
	var unknown []string
	for _, r := range prof.Syscalls {
		for _, n := range r.Names {
			if _, ok := AMD64.Syscall(n); !ok && !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		}
	}
	slices.Sort(unknown)
	want := []string{"_llseek", "_newselect", "chown32", "clock_adjtime64", "clock_getres_time64", "clock_gettime64",
		"clock_nanosleep_time64", "fadvise64_64", "fchown32", "fcntl64", "fstat64", "fstatat64", "fstatfs64", "ftruncate64",
		"futex_time64", "getegid32", "geteuid32", "getgid32", "getgroups32", "getresgid32", "getresuid32", "getuid32",
		"io_pgetevents_time64", "ipc", "lchown32", "lstat64", "mmap2", "mq_timedreceive_time64", "mq_timedsend_time64",
		"ppoll_time64", "pselect6_time64", "recv", "recvmmsg_time64", "riscv_hwprobe", "rt_sigtimedwait_time64",
		"sched_rr_get_interval_time64", "semtimedop_time64", "send", "sendfile64", "setfsgid32", "setfsuid32", "setgid32",
		"setgroups32", "setregid32", "setresgid32", "setresuid32", "setreuid32", "setuid32", "sigprocmask", "sigreturn",
		"socketcall", "stat64", "statfs64", "timer_gettime64", "timer_settime64", "timerfd_gettime64", "timerfd_settime64",
		"truncate64", "ugetrlimit", "utimensat_time64", "waitpid"}
	if !slices.Equal(unknown, want) {
		t.Errorf("names of the profile unknown to amd64:\n got %q\nwant %q", unknown, want)
	}
}
