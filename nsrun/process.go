package nsrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/moby/sys/capability"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/seccomp"
)

// agentSpec is what init sends the agent stage: the process to become,
// the seccomp filter to load (nil for none), byte for byte the program
// whose digest the launch record holds, and the Landlock scopes to put it
// in (flags of agentScopes, 0 for none).
type agentSpec struct {
	Process specs.Process
	Seccomp []byte
	Scoped  uint64
	// EnterRoot makes the stage enter the root init moved over its own
	// (enterMovedRoot) first.
	EnterRoot bool `json:",omitempty"`
}

// envFDs tells the agent stage how many preserved descriptors follow its
// spec and report pipes.
const envFDs = "_LAYERSEAL_NSRUN_FDS"

// agentStage is the stage between init and the agent, started ahead of
// the agent: the binary executed once more, which applies the process spec
// to itself and then, told to go, loads the filter and executes the
// agent's command in place. It starts before init sets up the namespace
// and applies the spec (sent once the namespace is set up) while the
// supervisor signs the launch record, so neither its Go runtime's start
// nor that work delays the agent; nothing of the agent's runs before go.
type agentStage struct {
	pid   int
	specW *os.File // the spec, then go; closing it before go ends the stage
	errR  *os.File // EOF with nothing on it: the agent's command was executed
	werr  error    // writing the spec failed (the stage reports why)
	// enterRoot is sent in the spec (agentSpec.EnterRoot).
	enterRoot bool
}

// startStage starts the agent stage as init's child, with init's stdin,
// stdout and stderr and the cfg.Sandbox.PreserveFDs descriptors init holds
// from 4 on; it waits for its spec.
func startStage(cfg *Config) (*agentStage, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		specR.Close()
		specW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	files := []uintptr{0, 1, 2, specR.Fd(), errW.Fd()}
	for i := 0; i < cfg.Sandbox.PreserveFDs; i++ {
		files = append(files, uintptr(4+i))
	}
	// syscall.ForkExec rather than os.StartProcess: init needs no pidfd
	// of the stage, and os.StartProcess tries a child first to find out
	// whether the kernel gives one.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"layerseal-exec"}, &syscall.ProcAttr{
		Dir:   "/",
		Env:   []string{envMarker + "=exec", envFDs + "=" + strconv.Itoa(cfg.Sandbox.PreserveFDs)},
		Files: files,
	})
	specR.Close()
	errW.Close()
	if err != nil {
		specW.Close()
		errR.Close()
		return nil, fmt.Errorf("start agent stage %q: %w", "/proc/self/exe", err)
	}
	return &agentStage{pid: pid, specW: specW, errR: errR}, nil
}

// send sends the stage the agent's process, filter (nil for none) and
// Landlock scopes (0 for none): it applies the process and the scopes,
// except the filter, and waits for go. A failure shows in start.
func (st *agentStage) send(cfg *Config, filter seccomp.Program, scoped uint64) {
	spec := agentSpec{Process: cfg.Process, Scoped: scoped, EnterRoot: st.enterRoot}
	if filter != nil {
		spec.Seccomp = filter.Bytes()
	}
	st.werr = json.NewEncoder(st.specW).Encode(&spec)
}

// start tells the stage to go and returns the agent's pid once its
// command was executed, or the stage's error.
func (st *agentStage) start() (int, error) {
	defer st.errR.Close()
	werr := st.werr
	if werr == nil {
		werr = json.NewEncoder(st.specW).Encode(message{Go: true})
	}
	st.specW.Close()
	// The stage's end of errW is close-on-exec: EOF with nothing written
	// means the agent's command was executed.
	b, rerr := io.ReadAll(io.LimitReader(st.errR, 64<<10))
	if len(b) > 0 {
		var m message
		if err := json.Unmarshal(b, &m); err != nil || m.Error == "" {
			return 0, fmt.Errorf("agent stage sent %q", b)
		}
		if m.NotFound {
			return 0, notFound(m.Error)
		}
		return 0, errors.New(m.Error)
	}
	if werr != nil {
		return 0, fmt.Errorf("send process spec to agent stage: %w", werr)
	}
	if rerr != nil {
		return 0, fmt.Errorf("read agent stage report: %w", rerr)
	}
	return st.pid, nil
}

// fdReader reads the descriptor *fd names when it reads, which may move.
type fdReader struct{ fd *int }

func (r fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(*r.fd, p)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// execAgent is the stage between init and the agent. It runs on one locked
// thread: credentials and capabilities are per thread, and the thread that
// executes the agent's command passes its own on.
func execAgent() {
	runtime.LockOSThread()
	// The spec and report pipes are used by number: they move before the
	// agent runs.
	spec, report := 3, 4
	unix.CloseOnExec(spec)
	unix.CloseOnExec(report)
	fail := func(err error) {
		b, _ := json.Marshal(message{Error: err.Error(), NotFound: errors.Is(err, ErrCommandNotFound)})
		_, _ = unix.Write(report, append(b, '\n'))
		os.Exit(125)
	}
	var as agentSpec
	dec := json.NewDecoder(fdReader{&spec})
	if err := dec.Decode(&as); err != nil {
		fail(fmt.Errorf("read process spec: %w", err))
	}
	var filter seccomp.Program
	if as.Seccomp != nil {
		var err error
		if filter, err = seccomp.ParseProgram(as.Seccomp); err != nil {
			fail(err)
		}
	}
	if as.EnterRoot {
		if err := enterMovedRoot(); err != nil {
			fail(err)
		}
	}
	p := &as.Process
	n, _ := strconv.Atoi(os.Getenv(envFDs))
	own, err := arrangeFDs(n, spec, report)
	spec, report = own[0], own[1]
	if err != nil {
		fail(fmt.Errorf("close the descriptors the agent must not inherit: %w", err))
	}
	if err := newSession(p.Terminal); err != nil {
		fail(err)
	}
	path, err := applyProcess(p, filter, as.Scoped)
	if err != nil {
		fail(err)
	}
	// Everything up to here was done while the supervisor wrote the launch
	// record; the agent's command runs only once init says go, and init
	// closing the pipe instead (the run was aborted) ends the stage.
	var m message
	if err := dec.Decode(&m); err != nil || !m.Go {
		os.Exit(125)
	}
	unix.Close(spec)
	if filter != nil && p.NoNewPrivileges {
		if err := loadFilter(filter); err != nil {
			fail(err)
		}
	}
	err = unix.Exec(path, p.Args, p.Env)
	fail(fmt.Errorf("exec %q: %w", path, err))
}

// applyProcess applies p to the calling thread and process, in the order
// that keeps each step permitted: the Landlock scopes (none when scoped is
// 0), limits and bounding set while still privileged, then groups and ids,
// then the remaining capability sets, no_new_privs and the working
// directory. It returns the resolved command.
// With no_new_privs the caller loads the seccomp filter (none when nil)
// last, right before it executes the command, so that only execve
// follows; without no_new_privs the kernel takes a filter only from a
// thread holding CAP_SYS_ADMIN, so applyProcess loads it before the
// capabilities and ids change instead (as runc does), and every call of
// the steps after it is one the default filter allows.
func applyProcess(p *specs.Process, filter seccomp.Program, scoped uint64) (string, error) {
	if scoped != 0 {
		if err := restrictScopes(scoped); err != nil {
			return "", err
		}
	}
	if p.User.Umask != nil {
		unix.Umask(int(*p.User.Umask & 0o777))
	}
	for _, r := range p.Rlimits {
		// syscall.Setrlimit, so that exec does not restore the soft
		// RLIMIT_NOFILE the Go runtime raised at start.
		if err := syscall.Setrlimit(rlimits[r.Type], &syscall.Rlimit{Cur: r.Soft, Max: r.Hard}); err != nil {
			return "", fmt.Errorf("setrlimit %s soft=%d hard=%d: %w", r.Type, r.Soft, r.Hard, err)
		}
	}
	if filter != nil && !p.NoNewPrivileges {
		if err := loadFilter(filter); err != nil {
			return "", err
		}
	}
	var caps capability.Capabilities
	if c := p.Capabilities; c != nil {
		var err error
		if caps, err = capability.NewPid2(0); err != nil {
			return "", fmt.Errorf("capabilities: %w", err)
		}
		caps.Clear(capability.CAPS | capability.BOUNDS | capability.AMBS)
		sets := map[capability.CapType][]string{
			capability.BOUNDING: c.Bounding, capability.EFFECTIVE: c.Effective, capability.PERMITTED: c.Permitted,
			capability.INHERITABLE: c.Inheritable, capability.AMBIENT: c.Ambient,
		}
		for which, names := range sets {
			list, err := parseCaps(names)
			if err != nil {
				return "", err
			}
			caps.Set(which, list...)
		}
		if err := caps.Apply(capability.BOUNDS); err != nil {
			return "", fmt.Errorf("drop bounding capabilities to %q: %w", c.Bounding, err)
		}
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return "", fmt.Errorf("prctl PR_SET_KEEPCAPS: %w", err)
		}
	}
	gids := append([]uint32(nil), p.User.AdditionalGids...)
	var gp uintptr
	if len(gids) > 0 {
		gp = uintptr(unsafe.Pointer(&gids[0]))
	}
	// Raw syscalls: only this thread changes, and it is the one that executes
	// the agent.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gids)), gp, 0); e != 0 {
		return "", fmt.Errorf("setgroups %v: %w", gids, e)
	}
	runtime.KeepAlive(gids)
	g, u := uintptr(p.User.GID), uintptr(p.User.UID)
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, g, g, g); e != 0 {
		return "", fmt.Errorf("setresgid %d: %w", p.User.GID, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, u, u, u); e != 0 {
		return "", fmt.Errorf("setresuid %d: %w", p.User.UID, e)
	}
	if caps != nil {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 0, 0, 0, 0); err != nil {
			return "", fmt.Errorf("prctl PR_SET_KEEPCAPS: %w", err)
		}
		if err := caps.Apply(capability.CAPS | capability.AMBS); err != nil {
			return "", fmt.Errorf("set capabilities %s: %w", caps, err)
		}
	}
	if p.NoNewPrivileges {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return "", fmt.Errorf("prctl PR_SET_NO_NEW_PRIVS: %w", err)
		}
	}
	if err := unix.Chdir(p.Cwd); err != nil {
		return "", fmt.Errorf("chdir %q: %w", p.Cwd, err)
	}
	return lookPath(p.Args[0], p.Env)
}

// loadFilter installs the agent's seccomp filter on the calling thread,
// which then executes the agent.
func loadFilter(filter seccomp.Program) error {
	if err := linux.SeccompSetModeFilter(filter); err != nil {
		return fmt.Errorf("load the agent's seccomp filter (run with --seccomp unconfined to go without it): %w", err)
	}
	return nil
}

// lookPath finds name as the agent would: a name with a slash is used as it
// is, others are searched in the PATH of env. Permissions are checked with
// the calling thread's credentials.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return "", fmt.Errorf("%w: %q", ErrCommandNotFound, name)
			}
			return "", err
		}
		return name, nil
	}
	var path string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	var denied error
	for dir := range strings.SplitSeq(path, ":") {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, name)
		err := executable(cand)
		if err == nil {
			return cand, nil
		}
		if denied == nil && errors.Is(err, unix.EACCES) {
			denied = err
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", fmt.Errorf("%w: %q in PATH %q", ErrCommandNotFound, name, path)
}

// executable checks that path is a regular file the thread may execute.
func executable(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("stat %q: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("command %q: not a regular file: %w", path, unix.EACCES)
	}
	if err := unix.Access(path, unix.X_OK); err != nil {
		return fmt.Errorf("command %q: %w", path, err)
	}
	return nil
}

// capNames maps "CAP_SYS_ADMIN" style names to capabilities.
var capNames = func() map[string]capability.Cap {
	m := map[string]capability.Cap{}
	for _, c := range capability.ListKnown() {
		m["CAP_"+strings.ToUpper(c.String())] = c
	}
	return m
}()

func parseCaps(names []string) ([]capability.Cap, error) {
	var caps []capability.Cap
	for _, n := range names {
		c, ok := capNames[n]
		if !ok {
			return nil, fmt.Errorf("capability %q: unknown", n)
		}
		caps = append(caps, c)
	}
	return caps, nil
}

func capSets(c *specs.LinuxCapabilities) [][]string {
	return [][]string{c.Bounding, c.Effective, c.Permitted, c.Inheritable, c.Ambient}
}

// capSysAdmin reports whether an agent started with p holds CAP_SYS_ADMIN or
// can regain it by executing a program. Root gets its inheritable and
// bounding sets on exec; anyone gets the bounding set through a set-user-ID
// or file-capability program unless no_new_privs is set.
func capSysAdmin(p *specs.Process) bool {
	root := p.User.UID == 0
	c := p.Capabilities
	if c == nil {
		return root || !p.NoNewPrivileges
	}
	has := func(set []string) bool { return slices.Contains(set, "CAP_SYS_ADMIN") }
	switch {
	case has(c.Effective), has(c.Permitted), has(c.Ambient):
		return true
	case root && (has(c.Bounding) || has(c.Inheritable)):
		return true
	default:
		return has(c.Bounding) && !p.NoNewPrivileges
	}
}

// rlimits maps the spec's rlimit names to resources.
var rlimits = map[string]int{
	"RLIMIT_AS": unix.RLIMIT_AS, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_CPU": unix.RLIMIT_CPU,
	"RLIMIT_DATA": unix.RLIMIT_DATA, "RLIMIT_FSIZE": unix.RLIMIT_FSIZE, "RLIMIT_LOCKS": unix.RLIMIT_LOCKS,
	"RLIMIT_MEMLOCK": unix.RLIMIT_MEMLOCK, "RLIMIT_MSGQUEUE": unix.RLIMIT_MSGQUEUE, "RLIMIT_NICE": unix.RLIMIT_NICE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_RSS": unix.RLIMIT_RSS,
	"RLIMIT_RTPRIO": unix.RLIMIT_RTPRIO, "RLIMIT_RTTIME": unix.RLIMIT_RTTIME, "RLIMIT_SIGPENDING": unix.RLIMIT_SIGPENDING,
	"RLIMIT_STACK": unix.RLIMIT_STACK,
}
