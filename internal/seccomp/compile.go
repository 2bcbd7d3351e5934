package seccomp

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Program is a compiled filter: classic BPF instructions over struct
// seccomp_data, as the kernel takes them.
type Program []unix.SockFilter

// Bytes is the program as the kernel holds it: each instruction as struct
// sock_filter (code uint16, jt uint8, jf uint8, k uint32) in the machine's
// byte order, 8 bytes each.
func (p Program) Bytes() []byte {
	b := make([]byte, 0, 8*len(p))
	for _, in := range p {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// SHA256 is the digest of Bytes.
func (p Program) SHA256() []byte {
	d := sha256.Sum256(p.Bytes())
	return d[:]
}

// ParseProgram reads what Bytes wrote.
func ParseProgram(b []byte) (Program, error) {
	if len(b)%8 != 0 || len(b) == 0 || len(b)/8 > maxInstructions {
		return nil, fmt.Errorf("seccomp program of %d bytes: not 1 to %d instructions of 8 bytes", len(b), maxInstructions)
	}
	p := make(Program, len(b)/8)
	for i := range p {
		c := b[8*i:]
		p[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(c), Jt: c[2], Jf: c[3], K: binary.NativeEndian.Uint32(c[4:])}
	}
	return p, nil
}

// Instructions returns the program as x/net/bpf instructions (for tests and
// for reading it).
func (p Program) Instructions() []bpf.Instruction {
	out := make([]bpf.Instruction, len(p))
	for i, in := range p {
		out[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}.Disassemble()
	}
	return out
}

// maxInstructions is the kernel's limit on a filter's length (BPF_MAXINSNS).
const maxInstructions = 4096

// Offsets in struct seccomp_data; an argument's low word comes first on a
// little-endian machine.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Return values of the filter.
const (
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
	retKillThread  = unix.SECCOMP_RET_KILL_THREAD
	retTrap        = unix.SECCOMP_RET_TRAP
	retErrno       = unix.SECCOMP_RET_ERRNO
	retLog         = unix.SECCOMP_RET_LOG
	retAllow       = unix.SECCOMP_RET_ALLOW
)

// ErrUnsupported is wrapped by Compile's error for parts of a profile it
// cannot express (notification, tracing, flags, listeners).
var ErrUnsupported = errors.New("not supported by the seccomp compiler")

// Compile turns p into a filter for arch. The program:
//
//  1. refuses another ABI: a call whose seccomp_data.arch is not arch.Audit,
//     or (amd64) whose number carries the x32 bit, kills the process;
//  2. answers ENOSYS to a number above the highest the profile names for
//     arch, when the default action is an errno (an allowlist), and the
//     default action otherwise;
//  3. finds the number in a binary search over ranges of numbers that share
//     their rules, and runs the rules of the call: first those whose action
//     is not SCMP_ACT_ALLOW, then the allowing ones, each group in the
//     profile's order; the first rule whose argument conditions all hold
//     (a rule without conditions always holds) gives the result, and when
//     none does the default action does.
//
// Names unknown to arch (calls of other architectures, as every profile
// holds) are skipped. Argument values compare as 64-bit unsigned numbers;
// SCMP_CMP_MASKED_EQ holds when (arg & Value) == ValueTwo. An errno action
// without ErrnoRet returns EPERM.
func Compile(p *specs.LinuxSeccomp, arch Arch) (Program, error) {
	if len(p.Flags) > 0 || p.ListenerPath != "" || p.ListenerMetadata != "" {
		return nil, fmt.Errorf("seccomp flags %q, listener %q: %w", p.Flags, p.ListenerPath, ErrUnsupported)
	}
	errno := uint(unix.EPERM)
	if p.DefaultErrnoRet != nil {
		errno = *p.DefaultErrnoRet
	}
	deflt, err := action(p.DefaultAction, &errno)
	if err != nil {
		return nil, fmt.Errorf("default action: %w", err)
	}
	// The rules of each call number, restrictive ones first.
	rules := map[uint32][]specs.LinuxSyscall{}
	var max uint32
	for _, allowing := range []bool{false, true} {
		for _, r := range p.Syscalls {
			if (r.Action == specs.ActAllow) != allowing {
				continue
			}
			for _, name := range r.Names {
				nr, ok := arch.Syscall(name)
				if !ok {
					continue
				}
				rules[nr] = append(rules[nr], r)
				max = maxOf(max, nr)
			}
		}
	}
	// One block of code per call number, and runs of numbers whose blocks
	// are the same.
	type run struct {
		lo    uint32
		block []bpf.Instruction
	}
	var runs []run
	defaultBlock := []bpf.Instruction{bpf.RetConstant{Val: deflt}}
	for nr := uint32(0); nr <= max; nr++ {
		block := defaultBlock
		if rs, ok := rules[nr]; ok {
			if block, err = callBlock(rs, deflt); err != nil {
				return nil, fmt.Errorf("rules of system call %d: %w", nr, err)
			}
		}
		if len(runs) > 0 && slices.Equal(runs[len(runs)-1].block, block) {
			continue
		}
		runs = append(runs, run{nr, block})
	}
	var tree func(rs []run) []bpf.Instruction
	tree = func(rs []run) []bpf.Instruction {
		if len(rs) == 1 {
			return rs[0].block
		}
		mid := len(rs) / 2
		left, right := tree(rs[:mid]), tree(rs[mid:])
		var out []bpf.Instruction
		if len(left) <= 255 {
			out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rs[mid].lo, SkipTrue: uint8(len(left))})
		} else {
			out = append(out, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: rs[mid].lo, SkipFalse: 1},
				bpf.Jump{Skip: uint32(len(left))})
		}
		return append(append(out, left...), right...)
	}
	above := deflt
	if deflt&unix.SECCOMP_RET_ACTION_FULL == retErrno {
		above = retErrno | uint32(unix.ENOSYS)
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch.Audit, SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if arch.X32Bit != 0 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: arch.X32Bit, SkipFalse: 1},
			bpf.RetConstant{Val: retKillProcess})
	}
	prog = append(prog,
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: max, SkipFalse: 1},
		bpf.RetConstant{Val: above})
	prog = append(prog, tree(runs)...)
	if len(prog) > maxInstructions {
		return nil, fmt.Errorf("seccomp program of %d instructions: the kernel takes at most %d", len(prog), maxInstructions)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp program: %w", err)
	}
	out := make(Program, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

func maxOf(a, b uint32) uint32 {
	if a > b {
		return a
	}
	return b
}

// callBlock is the code for one call number, the number being known: its
// rules in order, then the default action. A rule is its conditions, each
// jumping past the rule's return when it does not hold, then the return.
func callBlock(rules []specs.LinuxSyscall, deflt uint32) ([]bpf.Instruction, error) {
	var out []bpf.Instruction
	for _, r := range rules {
		ret, err := action(r.Action, r.ErrnoRet)
		if err != nil {
			return nil, err
		}
		var conds []step
		for _, a := range r.Args {
			c, err := condition(a)
			if err != nil {
				return nil, err
			}
			conds = append(conds, c...)
		}
		n := len(conds) + 1
		for i, s := range conds {
			out = append(out, s.resolve(n-i-1))
		}
		out = append(out, bpf.RetConstant{Val: ret})
		if len(r.Args) == 0 {
			return out, nil // later rules cannot be reached
		}
	}
	return append(out, bpf.RetConstant{Val: deflt}), nil
}

// action is the filter's return value for a profile action.
func action(a specs.LinuxSeccompAction, errno *uint) (uint32, error) {
	switch a {
	case specs.ActAllow:
		return retAllow, nil
	case specs.ActErrno:
		e := uint(unix.EPERM)
		if errno != nil {
			e = *errno
		}
		if e > unix.SECCOMP_RET_DATA {
			return 0, fmt.Errorf("errno %d: out of range", e)
		}
		return retErrno | uint32(e), nil
	case specs.ActKillProcess:
		return retKillProcess, nil
	case specs.ActKill, specs.ActKillThread:
		return retKillThread, nil
	case specs.ActTrap:
		return retTrap, nil
	case specs.ActLog:
		return retLog, nil
	}
	return 0, fmt.Errorf("action %q: %w", a, ErrUnsupported)
}

// step is one instruction of a condition. A jump's targets are relative
// as in BPF, or fail: past the rule's return.
type step struct {
	in     bpf.Instruction
	jt, jf int // for a JumpIf in in: skips, or fail
}

const fail = -1

func (s step) resolve(toEnd int) bpf.Instruction {
	j, ok := s.in.(bpf.JumpIf)
	if !ok {
		return s.in
	}
	skip := func(n int) uint8 {
		if n == fail {
			return uint8(toEnd)
		}
		return uint8(n)
	}
	j.SkipTrue, j.SkipFalse = skip(s.jt), skip(s.jf)
	return j
}

// condition is the code that falls through when argument a's condition
// holds and jumps to fail when it does not. The argument is 64 bits wide:
// its high word is compared first, the low word decides when the high words
// are equal.
func condition(a specs.LinuxSeccompArg) ([]step, error) {
	if a.Index > 5 {
		return nil, fmt.Errorf("argument index %d: there are six arguments", a.Index)
	}
	lo := bpf.LoadAbsolute{Off: offArgs + 8*uint32(a.Index), Size: 4}
	hi := bpf.LoadAbsolute{Off: offArgs + 8*uint32(a.Index) + 4, Size: 4}
	vlo, vhi := uint32(a.Value), uint32(a.Value>>32)
	ld := func(l bpf.LoadAbsolute) step { return step{in: l} }
	jmp := func(cond bpf.JumpTest, v uint32, jt, jf int) step {
		return step{in: bpf.JumpIf{Cond: cond, Val: v}, jt: jt, jf: jf}
	}
	// ordered is a > b (or a >= b when orEqual), and its negation.
	ordered := func(greater, orEqual bool) []step {
		test := bpf.JumpGreaterThan
		if orEqual {
			test = bpf.JumpGreaterOrEqual
		}
		if greater {
			// hi > vhi: holds; hi < vhi: fails; equal: the low words decide.
			return []step{ld(hi), jmp(bpf.JumpGreaterThan, vhi, 3, 0), jmp(bpf.JumpEqual, vhi, 0, fail),
				ld(lo), jmp(test, vlo, 0, fail)}
		}
		// a < b is not a >= b; a <= b is not a > b.
		inv := bpf.JumpGreaterOrEqual
		if orEqual {
			inv = bpf.JumpGreaterThan
		}
		return []step{ld(hi), jmp(bpf.JumpGreaterOrEqual, vhi, 0, 3), jmp(bpf.JumpEqual, vhi, 0, fail),
			ld(lo), jmp(inv, vlo, fail, 0)}
	}
	switch a.Op {
	case specs.OpEqualTo:
		return []step{ld(hi), jmp(bpf.JumpEqual, vhi, 0, fail), ld(lo), jmp(bpf.JumpEqual, vlo, 0, fail)}, nil
	case specs.OpNotEqual:
		return []step{ld(hi), jmp(bpf.JumpEqual, vhi, 0, 2), ld(lo), jmp(bpf.JumpEqual, vlo, fail, 0)}, nil
	case specs.OpGreaterThan:
		return ordered(true, false), nil
	case specs.OpGreaterEqual:
		return ordered(true, true), nil
	case specs.OpLessThan:
		return ordered(false, false), nil
	case specs.OpLessEqual:
		return ordered(false, true), nil
	case specs.OpMaskedEqual:
		var out []step
		mlo, mhi := uint32(a.Value), uint32(a.Value>>32)
		wlo, whi := uint32(a.ValueTwo), uint32(a.ValueTwo>>32)
		if mhi != 0 || whi != 0 {
			out = append(out, ld(hi), step{in: bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mhi}}, jmp(bpf.JumpEqual, whi, 0, fail))
		}
		return append(out, ld(lo), step{in: bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: mlo}}, jmp(bpf.JumpEqual, wlo, 0, fail)), nil
	}
	return nil, fmt.Errorf("argument operator %q: %w", a.Op, ErrUnsupported)
}
