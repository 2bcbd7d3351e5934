package seccomp

import (
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// constAllow is the kernel's seccomp action cache rule (Linux 5.11 and
// later, seccomp_is_const_allow in kernel/seccomp.c), written again: it runs
// prog knowing only the call number and the architecture, and answers true
// when the program allows the call without loading anything else. The
// kernel then allows that number from a bitmap without running the filter;
// a load of an argument or of the instruction pointer, or an instruction
// the rule does not know, makes the answer false and the filter run on
// every such call.
func constAllow(prog Program, nr, arch uint32) bool {
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			switch in.K {
			case offNr:
				a = nr
			case offArch:
				a = arch
			default:
				return false
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K == unix.SECCOMP_RET_ALLOW
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K,
			unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var ok bool
			switch in.Code & 0xf0 {
			case unix.BPF_JEQ:
				ok = a == in.K
			case unix.BPF_JGE:
				ok = a >= in.K
			case unix.BPF_JGT:
				ok = a > in.K
			case unix.BPF_JSET:
				ok = a&in.K != 0
			}
			if ok {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			a &= in.K
		default:
			return false
		}
	}
	return false
}

// Every call the profile allows without looking at its arguments is one
// the kernel's action cache can allow from the call number and the
// architecture alone, so the filter costs nothing on read, openat,
// newfstatat, getdents64, statx, close and the like. Calls whose answer
// depends on an argument, and refused calls, are never cached as allowed.
func TestActionCache(t *testing.T) {
	for _, a := range []Arch{AMD64, ARM64} {
		for _, caps := range [][]string{defaultCaps, nil, {"CAP_SYS_ADMIN"}} {
			prof, err := Profile(caps)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(prof, a)
			if err != nil {
				t.Fatal(err)
			}
			// For each number: allowed by a rule without conditions and
			// named by no rule with conditions or another action.
			plain, conditional := map[uint32]bool{}, map[uint32]bool{}
			for _, r := range prof.Syscalls {
				for _, n := range r.Names {
					v, ok := a.Syscall(n)
					if !ok {
						continue
					}
					if len(r.Args) == 0 && r.Action == specs.ActAllow {
						plain[v] = true
					} else {
						conditional[v] = true
					}
				}
			}
			cached := 0
			for name, v := range a.syscalls {
				got := constAllow(p, v, a.Audit)
				switch {
				case plain[v] && !conditional[v]:
					if !got {
						t.Errorf("%s, caps %q: %s (%d) is allowed whatever its arguments, but the kernel cannot cache it", a.Name, caps, name, v)
					}
					cached++
				case got && conditional[v]:
					t.Errorf("%s, caps %q: %s (%d) has argument rules, yet the cache rule allows it", a.Name, caps, name, v)
				case got:
					t.Errorf("%s, caps %q: %s (%d) is refused, yet the cache rule allows it", a.Name, caps, name, v)
				}
				if got {
					// What the rule allows, the program allows whatever
					// the arguments.
					for _, args := range [][6]uint64{{}, {^uint64(0), 1, unix.TIOCSTI, 1 << 32, 7, 0}} {
						if r := run(t, p, call{nr: v, arch: a.Audit, args: args}); r != allow {
							t.Errorf("%s: %s (%d) cached as allowed, but the program answers %#x to arguments %#x", a.Name, name, v, r, args)
						}
					}
				}
				if got && constAllow(p, v, a.Audit+1) {
					t.Errorf("%s: %s (%d) cached as allowed for a foreign architecture", a.Name, name, v)
				}
				if a.X32Bit != 0 && constAllow(p, v|a.X32Bit, a.Audit) {
					t.Errorf("%s: %s (%d) cached as allowed through the x32 ABI", a.Name, name, v)
				}
			}
			for _, name := range []string{"read", "write", "openat", "close", "getdents64", "statx", "newfstatat", "fstat", "lseek", "mmap", "futex"} {
				if v, ok := a.Syscall(name); ok && !constAllow(p, v, a.Audit) {
					t.Errorf("%s, caps %q: %s is not cached as allowed", a.Name, caps, name)
				}
			}
			// The rule can say no: the same program behind a load of an
			// argument is never cached.
			behind := append(Program{{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: offArgs}}, p...)
			for name, v := range a.syscalls {
				if constAllow(behind, v, a.Audit) {
					t.Errorf("%s: %s (%d) cached as allowed behind a load of an argument", a.Name, name, v)
				}
			}
			if cached < 250 {
				t.Errorf("%s, caps %q: only %d calls cached as allowed", a.Name, caps, cached)
			}
		}
	}
}
