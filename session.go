package layerseal

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/moby/sys/mountinfo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/internal/atomicfile"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/nsrun"
	"github.com/layerseal/layerseal/overlay"
	"github.com/layerseal/layerseal/policy"
	"github.com/layerseal/layerseal/probe"
)

// Version is layerseal's version, recorded in every launch record.
const Version = "0.1.0"

// DefaultPolicy is the scope and limits of a session that declares none.
var DefaultPolicy = attest.Policy{
	DigestCap:     overlay.DefaultDigestCap,
	MaxEntries:    overlay.DefaultMaxEntries,
	MaxDirEntries: overlay.DefaultMaxDirEntries,
	TimeBudget:    DefaultTimeBudget,
}

// DefaultTimeBudget bounds the final walk of a session that sets no time
// budget: past it the walk stops with a time-budget reason (the rest is
// kept in the state dir, not applied).
const DefaultTimeBudget = 30 * time.Minute

// RunConfig describes one session.
type RunConfig struct {
	Workspace string         // the directory the agent may change
	Key       *attest.Signer // loaded once, before anything else, and pinned
	KeyPath   string         // the key file, hidden from the agent
	Out       string         // where launch.json and statement.json go
	StateDir  string         // DefaultStateDir when empty
	Process   specs.Process  // the agent; see DefaultProcess
	Policy    attest.Policy  // DefaultPolicy's values where zero; a negative MinFree keeps no reserve
	Sandbox   nsrun.Sandbox  // the agent's confinement beyond the workspace
	// Stdin, Stdout and Stderr are the agent's; where one is a terminal the
	// agent gets a pseudo-terminal of its own instead (see nsrun.Start).
	Stdin, Stdout, Stderr *os.File
	// LogOutput, when set, is a new or empty directory outside the
	// workspace where the agent's stdout and stderr are kept as files
	// named stdout and stderr (0600) while still going to Stdout and
	// Stderr; the statement records their sizes and digests (see
	// attest.OutputLog). The agent's stdout and stderr are then pipes.
	LogOutput string
	// Log receives diagnostics (one line each); nil discards them.
	Log io.Writer
	// Progress, when set, is called once the agent ended: with "read"
	// for each entry of the upper and lower layers the final walk reads,
	// "sweep" before protected paths are swept, "sign" before the
	// statement is signed, then for each step of the apply (see
	// ApplyOptions.Progress).
	Progress func(step string, p attest.Path)
	// LeaveRemoval, when the change set is applied, leaves the session's
	// upper layer in the state dir's pruning dir for the caller to remove
	// with Store.RemovePruned (see ApplyOptions.LeaveRemoval).
	LeaveRemoval bool
	// AllowNet are the destinations the agent may reach on the proxied
	// network (Sandbox.Network "proxy", see NetworkProxy); with another
	// network they are an error.
	AllowNet []egress.Allow
	// InheritedEnv names the Process.Env entries whose values came from
	// the caller's environment: the launch record holds their names, not
	// their values (see LooksSecret for the others it leaves out).
	InheritedEnv []string
}

// RunResult is what a session produced.
type RunResult struct {
	Exit      attest.Exit
	Statement *attest.Statement
	Applied   bool   // the change set is now in the workspace
	Kept      string // the session's state dir, when it was kept
	// AttributeNotes name the lines of .gitattributes files in the swept
	// change set that hide changes from git diff (Review.AttributeNotes),
	// read before the change set was applied: once it is, show and diff
	// have no upper layer to read them from.
	AttributeNotes []AttributeNote
}

// SetupError is returned when the session failed before the agent started:
// nothing in the workspace changed.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// DefaultCapabilities are what an agent running as root keeps when its
// process names none and it shares the host's network: the usual container
// set without CAP_SYS_ADMIN, so it cannot rearrange its mounts, without
// CAP_MKNOD, so it makes no device node, without CAP_SETFCAP, so it gives no
// file capabilities (which apply would carry to the host), and without
// CAP_NET_RAW, with which it could read every packet of the host, loopback
// included, through an AF_PACKET socket (a --process file may still name
// any of them). In a
// network namespace of its own it keeps CAP_NET_RAW as well (see
// DefaultProcess): there it sees only its own traffic.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// DefaultProcess is the agent process for args when nothing else is said:
// the given user, the workspace as working directory, a minimal environment,
// no_new_privileges, and for root DefaultCapabilities, with CAP_NET_RAW
// added when network is "none" or "proxy", a namespace of its own (see
// nsrun.Sandbox); no capabilities for any other user.
func DefaultProcess(args []string, uid, gid uint32, network string) specs.Process {
	p := specs.Process{
		Args:            args,
		User:            specs.User{UID: uid, GID: gid},
		NoNewPrivileges: true,
	}
	caps := []string{}
	if uid == 0 {
		caps = slices.Clone(DefaultCapabilities)
		if network == "" || network == NetworkNone || network == NetworkProxy {
			caps = append(caps, "CAP_NET_RAW")
		}
	}
	p.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	return p
}

// Run runs one session: it checks its inputs, launches the agent over an
// overlay of the workspace, signs a launch record before the agent starts
// and a change statement after it ends, and applies the change set to the
// workspace, or keeps it staged (see the package doc). Errors before the
// agent started are *SetupError (wrapping nsrun.ErrCommandNotFound when
// the command does not exist, ErrWorkspaceLocked when another session
// holds the workspace). After the
// agent ran, the change set is never lost: on any error it stays in the
// session's state dir and the error says how to go on.
func Run(cfg RunConfig) (*RunResult, error) {
	s, err := prepare(cfg)
	if err != nil {
		return nil, &SetupError{err}
	}
	defer s.wsDir.Close()
	if s.logDir != nil {
		defer s.logDir.Close()
	}
	return s.run()
}

// session is one run in progress.
type session struct {
	cfg      RunConfig
	ws       string // absolute, symlinks resolved
	out      string
	dir      sessionDir
	rec      sessionRecord // written with the launch record
	store    *Store
	reader   *reader // of the session's upper layer, once it has one
	features probe.Features
	lower    linux.Stat
	// wsDir is the workspace root opened (and identified as lower) before
	// launch: the final read, the sweep and the apply work beneath it.
	wsDir     *os.File
	submount  []attest.Reason
	launch    []byte
	launchRec *attest.LaunchRecord // what launch holds
	sandbox   attest.Sandbox       // in force, as the launch record says
	log       func(format string, args ...any)
	cp        *checkpointer // the session's checkpoints, once the agent ran
	intr      *interrupts   // the supervisor's interrupts, once the agent started
	logDir    *os.File      // RunConfig.LogOutput opened, or nil
	olog      *outputLog    // the copies into logDir while the agent runs
	// mapped waits for the probe of the session dir's filesystem that
	// probeMapped started, whose answer it then holds in stamped and
	// stampedErr.
	mapped     func() (bool, error)
	stamped    bool
	stampedErr error
	upperLimit []attest.Reason // why the upper layer's watcher stopped the agent, if it did
	egress     *egressProxy    // on the proxied network, once started
}

func prepare(cfg RunConfig) (*session, error) {
	s := &session{cfg: cfg, log: func(string, ...any) {}}
	if cfg.Log != nil {
		s.log = func(format string, args ...any) { fmt.Fprintf(cfg.Log, "layerseal: "+format+"\n", args...) }
	}
	if err := RequireRoot(); err != nil {
		return nil, err
	}
	if cfg.Key == nil {
		return nil, errors.New("no signing key")
	}
	if len(cfg.Process.Args) == 0 {
		return nil, errors.New("no agent command given")
	}
	if err := checkNetwork(&cfg); err != nil {
		return nil, err
	}
	var err error
	if s.ws, err = resolveDir("workspace", cfg.Workspace); err != nil {
		return nil, err
	}
	if s.ws == "/" {
		return nil, errors.New("workspace \"/\": the root directory cannot be a workspace")
	}
	s.store = OpenStore(cfg.StateDir)
	cfg.StateDir = s.store.Dir()
	if cfg.Out == "" {
		return nil, errors.New("no output dir given")
	}
	for _, c := range []struct{ what, p string }{{"output dir", cfg.Out}, {"state dir", cfg.StateDir}, {"key", cfg.KeyPath}} {
		if c.p != "" && attest.Within(evalOrSelf(absOrSelf(c.p)), s.ws) {
			return nil, fmt.Errorf("%s %q is inside the workspace %q: the agent could reach it", c.what, c.p, s.ws)
		}
	}
	reserved := map[string]string{evalOrSelf(cfg.StateDir): "state dir", evalOrSelf(absOrSelf(cfg.Out)): "output dir"}
	if cfg.KeyPath != "" {
		reserved[evalOrSelf(absOrSelf(cfg.KeyPath))] = "key"
	}
	if cfg.LogOutput != "" {
		reserved[evalOrSelf(absOrSelf(cfg.LogOutput))] = "log dir"
	}
	if cfg.Sandbox.Writable, err = nsrun.CheckWritable(cfg.Sandbox.Writable, s.ws, reserved); err != nil {
		return nil, err
	}
	if cfg.Sandbox.ReadOnly, err = nsrun.CheckReadOnly(cfg.Sandbox.ReadOnly, s.ws, reserved); err != nil {
		return nil, err
	}
	if s.out, err = prepareOut(cfg.Out); err != nil {
		return nil, err
	}
	if attest.Within(s.ws, evalOrSelf(cfg.StateDir)) {
		return nil, fmt.Errorf("workspace %q is inside the state dir %q", s.ws, cfg.StateDir)
	}
	if cfg.LogOutput != "" {
		if s.logDir, err = prepareLogDir(cfg.LogOutput, s.ws, s.out, cfg.StateDir); err != nil {
			return nil, err
		}
	}
	// Made now (as the first session would), so that the first run already
	// keeps the kernel's features for the next.
	if err := os.MkdirAll(s.store.Dir(), 0o700); err != nil {
		return nil, fmt.Errorf("state dir %q: %w", cfg.StateDir, unwrapPath(err))
	}
	if s.features, err = detectFeatures(s.store.Dir()); err != nil {
		return nil, err
	}
	if !s.features.Overlay.OK() {
		return nil, fmt.Errorf("this kernel cannot mount an overlay filesystem (%s)", s.features.Overlay.Detail)
	}
	fd, err := linux.Openat(unix.AT_FDCWD, s.ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", s.ws, unwrapPath(err))
	}
	s.wsDir = os.NewFile(uintptr(fd), s.ws)
	if s.lower, err = linux.Lstat(fd, ""); err != nil {
		s.wsDir.Close()
		return nil, fmt.Errorf("workspace %q: %w", s.ws, err)
	}
	if s.submount, err = submounts(s.ws); err != nil {
		s.wsDir.Close()
		return nil, err
	}
	s.cfg = cfg
	s.cfg.Policy = fillPolicy(cfg.Policy)
	if s.cfg.Policy.Protect, err = protectGitHooks(s.ws, s.cfg.Policy.Protect); err != nil {
		s.wsDir.Close()
		return nil, err
	}
	if err := s.prepareUpperLimit(); err != nil {
		s.wsDir.Close()
		return nil, err
	}
	return s, nil
}

func fillPolicy(p attest.Policy) attest.Policy {
	if p.DigestCap == 0 {
		p.DigestCap = DefaultPolicy.DigestCap
	}
	if p.MaxEntries == 0 {
		p.MaxEntries = DefaultPolicy.MaxEntries
	}
	if p.MaxDirEntries == 0 {
		p.MaxDirEntries = DefaultPolicy.MaxDirEntries
	}
	if p.TimeBudget == 0 {
		p.TimeBudget = DefaultPolicy.TimeBudget
	}
	// The built-in protected paths hold whether or not they exist: an
	// agent must not write the next session's policy, nor what git or an
	// editor runs when the operator reviews its work.
	for _, b := range policy.BuiltinGlobs() {
		if !slices.Contains(p.Protect, attest.Path(b)) {
			p.Protect = append(slices.Clip(p.Protect), attest.Path(b))
		}
	}
	return p
}

// ErrNeedsRoot is wrapped by the error of anything that needs root: a
// session mounts an overlay in a new mount namespace, and its state dir is
// root's alone.
var ErrNeedsRoot = errors.New("needs root")

// RequireRoot fails with ErrNeedsRoot unless the process runs as root.
func RequireRoot() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("layerseal %w: sessions mount an overlay in a new mount namespace and keep their state where only root can reach it", ErrNeedsRoot)
	}
	return nil
}

// resolveDir returns the absolute, symlink-free path of an existing dir.
func resolveDir(what, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("no %s given", what)
	}
	abs, err := filepath.Abs(p)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", what, p, unwrapPath(err))
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s %q: %w", what, p, unwrapPath(err))
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s %q is not a directory", what, p)
	}
	return abs, nil
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// evalOrSelf resolves symlinks in p as far as p exists.
func evalOrSelf(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	if parent := filepath.Dir(p); parent != p {
		return filepath.Join(evalOrSelf(parent), filepath.Base(p))
	}
	return p
}

// prepareOut makes the output dir and checks that it is writable and holds
// no earlier session.
func prepareOut(out string) (string, error) {
	abs := absOrSelf(out)
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("output dir %q: %w", out, unwrapPath(err))
	}
	abs = evalOrSelf(abs)
	for _, name := range []string{LaunchFile, StatementFile, attest.HeadFile(StatementFile), SigstoreFile} {
		if _, err := os.Lstat(filepath.Join(abs, name)); err == nil {
			return "", fmt.Errorf("output dir %q already holds %s of another session: give a new --out, or remove that dir first", out, name)
		}
	}
	f, err := os.CreateTemp(abs, ".write-check-")
	if err != nil {
		return "", fmt.Errorf("output dir %q is not writable: %w", out, unwrapPath(err))
	}
	f.Close()
	os.Remove(f.Name())
	return abs, nil
}

// submounts lists the mounts beneath the workspace: the overlay's lower
// layer does not include them, so the agent cannot see or change them and
// the statement cannot speak for them.
func submounts(ws string) ([]attest.Reason, error) {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(ws))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var out []attest.Reason
	seen := map[string]bool{}
	for _, m := range infos {
		if m.Mountpoint == ws || seen[m.Mountpoint] {
			continue
		}
		seen[m.Mountpoint] = true
		rel, _ := filepath.Rel(ws, m.Mountpoint)
		out = append(out, attest.Reason{Code: attest.Submount, Path: attest.Path(rel),
			Detail: fmt.Sprintf("a %s mount lies under the workspace; the overlay does not cover it", m.FSType)})
	}
	return out, nil
}

// kernelFeatures is the launch record's account of what probe found.
func kernelFeatures(f probe.Features) attest.Kernel {
	feats := map[string]bool{
		"statx_mnt_id":        f.StatxMountID.OK(),
		"statx_mnt_id_unique": f.StatxMountIDUnique.OK(),
		"openat2":             f.Openat2.OK(),
		"overlay":             f.Overlay.OK(),
		"userxattr":           f.UserXattr.OK(),
	}
	for _, s := range f.Simulated {
		feats["simulated:"+s] = true
	}
	return attest.Kernel{Release: f.KernelRelease, Features: feats}
}

func (s *session) run() (*RunResult, error) {
	id := attest.NewSessionID()
	lock, err := s.store.lockWorkspace(s.ws, s.lower, id)
	if err != nil {
		return nil, &SetupError{err}
	}
	defer lock.release()
	dir, err := s.store.create(id)
	if err != nil {
		return nil, &SetupError{err}
	}
	s.dir = dir
	s.probeMapped()
	if s.reader, err = newReader(dir.upper(), dir.work(), s.ws, s.wsDir, s.cfg.Policy, !s.features.StatxMountID.OK()); err != nil {
		s.dropEmpty()
		return nil, &SetupError{err}
	}
	if !s.features.Openat2.OK() {
		linux.DisableOpenat2()
	}
	hide := []string{s.cfg.StateDir, s.out}
	if s.cfg.KeyPath != "" {
		if k, err := filepath.Abs(s.cfg.KeyPath); err == nil {
			hide = append(hide, evalOrSelf(k))
		}
	}
	stdout, stderr := s.cfg.Stdout, s.cfg.Stderr
	if s.logDir != nil {
		hide = append(hide, s.logDir.Name())
		if s.olog, stdout, stderr, err = startOutputLog(s.logDir, stdout, stderr); err != nil {
			s.dropEmpty()
			return nil, &SetupError{err}
		}
	}
	nc := nsrun.Config{Workspace: s.ws, Upper: dir.upper(), Work: dir.work(), Hide: hide, Process: s.cfg.Process, Sandbox: s.cfg.Sandbox}
	r, err := nsrun.Start(nc, s.cfg.Stdin, stdout, stderr)
	if s.olog != nil {
		s.olog.closeAgentEnds()
	}
	if err != nil {
		s.dropEmpty()
		s.dropLogs()
		return nil, &SetupError{err}
	}
	ready, err := r.Ready()
	if err == nil {
		defer s.endNetwork()
		err = s.startNetwork(r, &ready)
	}
	if err != nil {
		r.Abort()
		s.dropEmpty()
		s.dropLogs()
		return nil, &SetupError{err}
	}
	if err := s.writeLaunch(id, ready); err != nil {
		r.Abort()
		s.dropEmpty()
		s.dropLogs()
		return nil, &SetupError{err}
	}
	cps, err := s.startCheckpoints(id)
	if err != nil {
		r.Abort()
		s.dropEmpty()
		s.dropLogs()
		return nil, &SetupError{err}
	}
	s.intr = s.watchInterrupts(r.Kill)
	defer s.intr.end()
	if err := r.Go(); err != nil {
		cps.end()
		r.Abort()
		s.dropEmpty()
		s.dropLaunch()
		s.dropLogs()
		return nil, &SetupError{err}
	}
	upper := s.watchUpper(r.Kill)
	res, err := r.Wait()
	s.upperLimit = upper.end()
	s.cp = cps.end()
	os.Remove(filepath.Join(s.out, CheckpointDir)) // only when no checkpoint was taken
	s.intr.fromTerminal(r.Interrupted(), r.Killed())
	if _, killed := s.intr.signal(); err != nil && !killed {
		// The agent ran but the supervisor lost track of its end: attest
		// what is there, and say so.
		s.log("%v", err)
	}
	return s.finish(id, res, err != nil)
}

// dropLaunch removes what the session wrote to the output dir when the
// agent never started (its command was not found): the output dir can be
// used again.
func (s *session) dropLaunch() {
	os.Remove(filepath.Join(s.out, LaunchFile))
	os.Remove(filepath.Join(s.out, CheckpointDir)) // only when empty
}

// dropLogs removes the log files when the agent never started.
func (s *session) dropLogs() {
	if s.olog != nil {
		s.olog.discard(s.logDir)
		s.olog = nil
	}
}

// dropEmpty removes the session dir when its upper layer is still empty
// (the agent never ran); otherwise it keeps it.
func (s *session) dropEmpty() {
	s.mappedStamped() // its scratch file is gone once it returns
	if ents, err := os.ReadDir(s.dir.upper()); err == nil && len(ents) == 0 {
		os.RemoveAll(string(s.dir))
	}
}

func (s *session) writeLaunch(id string, ready nsrun.Ready) error {
	launched := linux.CoarseNow()
	agent, unrecorded := recordedEnv(s.cfg.Process, s.cfg.InheritedEnv)
	lr := &attest.LaunchRecord{
		SessionID:   id,
		Workspace:   attest.Bytes(s.ws),
		Lower:       attest.LowerIdentity{Dev: s.lower.Dev, Ino: s.lower.Ino, MountID: s.lower.MountID, MountIDKnown: s.lower.HasMountID && s.features.StatxMountID.OK()},
		Overlay:     attest.OverlayOptions{Options: ready.Mounted.Options, Missing: ready.Mounted.Missing},
		Kernel:      kernelFeatures(s.features),
		Agent:       agent,
		Sandbox:     ready.Sandbox,
		Policy:      s.cfg.Policy,
		ToolVersion: Version,
		Started:     time.Now().UTC(),
		// Values left out: given by name, or a secret's.
		EnvNotRecorded: unrecorded,
	}
	if !lr.Lower.MountIDKnown {
		lr.Lower.MountID = 0
	}
	b, err := attest.SignLaunch(s.cfg.Key, lr)
	if err != nil {
		return fmt.Errorf("sign launch record: %w", err)
	}
	s.rec = sessionRecord{ID: id, Workspace: s.ws, Out: s.out, PublicKey: s.cfg.Key.Public(),
		Launched: launched.UnixNano(), Started: lr.Started, GitHead: readGitHead(s.wsDir)}
	rec, err := json.Marshal(s.rec)
	if err != nil {
		return err
	}
	// All three are on disk before the agent starts, written together: one
	// wait for the disk for the files and one for their directories.
	files := []atomicfile.File{
		{Path: s.dir.record(), Data: rec, Perm: 0o600},
		{Path: filepath.Join(string(s.dir), LaunchFile), Data: b, Perm: 0o600},
		{Path: filepath.Join(s.out, LaunchFile), Data: b, Perm: 0o644},
	}
	if err := errors.Join(atomicfile.WriteFiles(files)...); err != nil {
		// The session dir goes with dropEmpty; the output dir must not
		// keep a launch record of a session that never ran.
		os.Remove(files[2].Path)
		return err
	}
	s.launch, s.launchRec, s.sandbox = b, lr, ready.Sandbox
	return nil
}

// finish attests the upper layer, writes the statement and applies it.
func (s *session) finish(id string, res nsrun.Result, lostEnd bool) (*RunResult, error) {
	out := &RunResult{Exit: attest.Exit{Code: res.ExitCode}, Kept: string(s.dir)}
	var logs []attest.OutputLog
	if s.olog != nil {
		var notes []string
		logs, notes = s.olog.finish()
		for _, n := range notes {
			s.log("%s", n)
		}
	}
	if res.Signal != 0 {
		out.Exit = attest.Exit{Code: 128 + res.Signal, Signal: unix.SignalName(unix.Signal(res.Signal))}
	}
	reasons := append(append([]attest.Reason(nil), s.submount...), s.upperLimit...)
	for _, m := range res.Mounts {
		reasons = append(reasons, attest.Reason{Code: attest.AgentMount, Path: m.Path, Detail: m.Detail})
	}
	if res.Outlived > 0 {
		reasons = append(reasons, attest.Reason{Code: attest.AgentOutlived,
			Detail: fmt.Sprintf("%d process(es) outlived the agent's main process and were killed", res.Outlived)})
	}
	if res.OOMKills > 0 {
		s.log("the agent reached its memory limit of %d bytes: the kernel killed %d of its processes", s.sandbox.MemoryMax, res.OOMKills)
	}
	if res.CapSysAdmin {
		reasons = append(reasons, attest.Reason{Code: attest.CapSysAdmin,
			Detail: "the agent held CAP_SYS_ADMIN and could rearrange its mounts"})
	}
	intr, killed := s.intr.signal()
	if intr != nil {
		out.Exit.Interrupt = unix.SignalName(intr.(unix.Signal))
	}
	switch {
	case killed && lostEnd:
		who := "a second Ctrl-C"
		if len(s.upperLimit) > 0 {
			who = "the upper layer's limit"
		}
		out.Exit = attest.Exit{Code: 128 + int(unix.SIGKILL), Signal: "SIGKILL", Interrupt: out.Exit.Interrupt}
		reasons = append(reasons, attest.Reason{Code: attest.UnobservedEnd,
			Detail: who + " stopped the run: the agent's namespace was killed (SIGKILL) before it could report how the agent ended or audit its mounts"})
	case killed:
		// Init killed the namespace and reported: the agent's end (SIGKILL)
		// and the mount audit are as it saw them.
	case lostEnd:
		reasons = append(reasons, attest.Reason{Code: attest.UnobservedEnd,
			Detail: "the supervisor did not observe the end of the run"})
	}
	known, head := s.cp.final()
	st, excluded, b, err := finishStatement(s.reader, ending{
		rec: s.rec, launchEnv: s.launch, launch: s.launchRec, ws: s.wsDir, exit: out.Exit, reasons: reasons,
		logs: logs, egress: s.stopEgress(), known: known, head: head, key: s.cfg.Key, progress: s.cfg.Progress,
	})
	if err != nil {
		return out, fmt.Errorf("%w; the change set is kept in %s", err, s.dir)
	}
	if out.AttributeNotes, err = s.attributeNotes(st); err != nil {
		return out, fmt.Errorf("read the change set's .gitattributes: %w; the change set is kept in %s", err, s.dir)
	}
	journaled, err := s.writeStatement(st, b)
	if err != nil {
		return out, err
	}
	out.Statement = st
	if out.Applied, err = s.settle(b, st, excluded, journaled); err != nil || !out.Applied {
		return out, err
	}
	out.Kept = ""
	return out, nil
}

// writeStatement writes the signed statement b of st to the output dir
// and the session's state dir, and its signed head and Sigstore bundle to
// the output dir, all together (atomicfile.WriteFiles), the statement
// first; and last, for an empty change set the run applies, the journal
// that says it is applied (see emptyApplied), reporting whether it wrote
// that. Only the output dir's statement must be written: the agent may
// have filled the state dir's filesystem, and the statement must exist
// somewhere; when it is not, nothing else is left either. The others
// failing is logged (a journal not written is written by settle).
func (s *session) writeStatement(st *attest.Statement, b []byte) (journaled bool, _ error) {
	files := []atomicfile.File{
		{Path: filepath.Join(s.out, StatementFile), Data: b, Perm: 0o644},
		{Path: filepath.Join(string(s.dir), StatementFile), Data: b, Perm: 0o600},
	}
	add := func(path string, data []byte, perm os.FileMode) error {
		files = append(files, atomicfile.File{Path: path, Data: data, Perm: perm})
		return nil
	}
	// Signed here, written below: these fail only to sign.
	headErr := writeHead(s.cfg.Key, attest.HeadOf(st), filepath.Join(s.out, attest.HeadFile(StatementFile)), add)
	sigErr := writeSigstore(s.cfg.Key, b, filepath.Join(s.out, SigstoreFile), add)
	signed := len(files)
	if j := s.emptyApplied(st, b); j != nil {
		files = append(files, *j)
	}
	errs := atomicfile.WriteFiles(files)
	if errs[0] != nil {
		for i, f := range files[1:] {
			if errs[i+1] == nil {
				os.Remove(f.Path)
			}
		}
		return false, fmt.Errorf("%w; the change set is kept in %s", errs[0], s.dir)
	}
	if errs[1] != nil {
		s.log("keeping a copy of the statement in the state dir: %v", errs[1])
	}
	for i, f := range files[2:signed] {
		if err := errs[i+2]; err == nil {
			continue
		} else if filepath.Base(f.Path) == SigstoreFile {
			sigErr = fmt.Errorf("%w: %v", ErrSigstoreNotWritten, err)
		} else {
			headErr = fmt.Errorf("write the head: %w", err)
		}
	}
	if headErr != nil {
		s.log("%v: %v", ErrHeadNotWritten, headErr)
	}
	if sigErr != nil {
		s.log("%v", sigErr)
	}
	return len(files) > signed && errs[signed] == nil, nil
}

// Unexamined reports whether parts of the upper layer of st's session
// were not examined: such a change set is never applied automatically,
// and Apply applies only what was examined, keeping the upper layer.
func Unexamined(st *attest.Statement) bool { return unexamined(st.Incomplete) }

// unexamined reports whether any reason means part of the upper layer was
// not read, so applying the statement did not carry all of it over.
func unexamined(rs []attest.Reason) bool {
	return slices.ContainsFunc(rs, func(r attest.Reason) bool { return r.Code.Unexamined() })
}

// Attest reads the quiescent upper layer against the lower layer (the
// workspace, not mounted) and returns an unsigned statement of it: entries,
// Merkle root and the reader's incomplete reasons. The caller fills in the
// session, launch binding and exit, and adds its own reasons.
func Attest(upper, work, lower string, p attest.Policy, noMountID bool) (*attest.Statement, error) {
	r, err := newReader(upper, work, lower, nil, p, noMountID)
	if err != nil {
		return nil, err
	}
	return r.statement(nil, nil)
}

// sortReasons orders reasons by code, then path, and drops exact repeats.
func sortReasons(rs []attest.Reason) []attest.Reason {
	sort.SliceStable(rs, func(i, j int) bool {
		if rs[i].Code != rs[j].Code {
			return rs[i].Code < rs[j].Code
		}
		return rs[i].Path < rs[j].Path
	})
	out := rs[:0]
	for i, r := range rs {
		if i > 0 && r == rs[i-1] {
			continue
		}
		out = append(out, r)
	}
	return out
}

func sha(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}
