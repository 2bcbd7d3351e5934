package nsrun

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/privtest"
)

// connectEnv makes the test binary connect to the unix socket at each of
// its arguments and print "connected PATH" or "refused PATH", then exit: the
// agents' socket client.
const connectEnv = "LAYERSEAL_TEST_CONNECT"

func TestMain(m *testing.M) {
	Init()
	if os.Getenv(connectEnv) == "1" {
		for _, p := range os.Args[1:] {
			if c, err := net.Dial("unix", p); err == nil {
				c.Close()
				fmt.Println("connected", p)
			} else {
				fmt.Println("refused", p)
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// env is a workspace with a file in it, and a state dir holding the upper
// and work dirs and a key.
type env struct {
	ws, upper, work, state, key string
}

// agentStderr is a pipe copied to the test's stderr. Tests give it to the
// agent instead of os.Stderr: where the tests run on a console (the kernel
// matrix's guests) a terminal there would give the agent a pseudo-terminal,
// and a session leader's exit hangs up its background jobs.
func agentStderr(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { io.Copy(os.Stderr, r); r.Close(); close(done) }()
	t.Cleanup(func() { w.Close(); <-done })
	return w
}

func newEnv(t *testing.T) env {
	t.Helper()
	dir := t.TempDir()
	e := env{ws: filepath.Join(dir, "ws"), state: filepath.Join(dir, "state")}
	e.upper, e.work, e.key = filepath.Join(e.state, "upper"), filepath.Join(e.state, "work"), filepath.Join(e.state, "key")
	for _, d := range []string{e.ws, filepath.Join(e.ws, "sub"), e.state, e.upper, e.work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, s := range map[string]string{filepath.Join(e.ws, "old"): "old content\n", e.key: "SECRET-KEY\n"} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e env) config(args ...string) Config {
	return Config{Workspace: e.ws, Upper: e.upper, Work: e.work, Hide: []string{e.state, e.key},
		Process: specs.Process{Args: args}}
}

// launch runs cfg to the end and returns the result and the agent's stdout.
func launch(t *testing.T, cfg Config) (Result, string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run, err := Start(cfg, nil, w, agentStderr(t))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string)
	go func() { b, _ := io.ReadAll(r); out <- string(b) }()
	ready, err := run.Ready()
	if err != nil {
		t.Fatalf("ready: %v", err)
	}
	if len(ready.Mounted.Options) == 0 {
		t.Errorf("ready reports no mounted options: %+v", ready)
	}
	if err := run.Go(); err != nil {
		run.Abort()
		return Result{}, <-out, err
	}
	res, err := run.Wait()
	return res, <-out, err
}

func sh(e env, script string) Config { return e.config("sh", "-c", script) }

// TestAgentWaitsForGo: init starts the agent's stage before it sets up
// the namespace, but nothing of the agent's runs before Go: the upper
// layer is still empty a while after Ready, and after Abort; the same
// agent, let go, writes there.
func TestAgentWaitsForGo(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	upperEmpty := func(when string) {
		t.Helper()
		ents, err := os.ReadDir(e.upper)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) > 0 {
			t.Errorf("%s, the upper layer holds %s: the agent ran before Go", when, ents[0].Name())
		}
	}
	script := "echo ran > ran"
	run, err := Start(sh(e, script), nil, nil, agentStderr(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Ready(); err != nil {
		run.Abort()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	upperEmpty("300ms after Ready")
	run.Abort()
	upperEmpty("after Abort")
	e = newEnv(t)
	if _, _, err := launch(t, sh(e, script)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.upper, "ran")); err != nil || string(b) != "ran\n" {
		t.Errorf("after Go the agent wrote %q, %v; want \"ran\\n\" in the upper layer", b, err)
	}
}

func TestAgentWritesLandInUpper(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	res, out, err := launch(t, sh(e, `echo hi > new && cat old && pwd && echo "ppid=$PPID" && tr '\0' ' ' < /proc/1/cmdline && echo && ls /proc | grep -c '^[0-9]'`))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Outlived != 0 || len(res.Mounts) != 0 {
		t.Errorf("result %+v", res)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || lines[0] != "old content" || lines[1] != e.ws || lines[2] != "ppid=1" || !strings.HasPrefix(lines[3], "layerseal-init") {
		t.Fatalf("agent printed %q", out)
	}
	if n := lines[4]; n < "2" || n > "4" || len(n) != 1 { // init, sh, and perhaps ls and grep
		t.Errorf("agent sees %s processes in /proc", lines[4])
	}
	if b, err := os.ReadFile(filepath.Join(e.upper, "new")); err != nil || string(b) != "hi\n" {
		t.Errorf("upper/new: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.ws, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("write reached the workspace: %v", err)
	}
}

func TestLeftoverProcessesKilledAndCounted(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	res, _, err := launch(t, sh(e, `sleep 100 </dev/null >/dev/null 2>&1 & sleep 100 </dev/null >/dev/null 2>&1 & exit 3`))
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || res.Outlived != 2 {
		t.Errorf("result %+v, want exit 3 and 2 outlived", res)
	}
}

func TestHiddenPathsUnreadable(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	res, out, err := launch(t, sh(e, `cat `+e.key+`; echo "files=$(ls -A `+e.state+` | wc -l)"; echo x > `+e.state+`/f || echo ro`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "SECRET") || !strings.Contains(out, "files=0") || !strings.Contains(out, "ro") {
		t.Errorf("agent printed %q", out)
	}
	if len(res.Mounts) != 0 {
		t.Errorf("masks reported as agent mounts: %+v", res.Mounts)
	}
}

func TestAgentMountReported(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	res, _, err := launch(t, sh(e, `mount -t tmpfs agent-tmpfs sub`))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mounts) != 1 || res.Mounts[0].Path != attest.Path("sub") || !strings.Contains(res.Mounts[0].Detail, "agent-tmpfs") {
		t.Errorf("mount findings %+v", res.Mounts)
	}
	if !res.CapSysAdmin {
		t.Error("root agent with all capabilities not reported as holding CAP_SYS_ADMIN")
	}
	e = newEnv(t)
	res, _, err = launch(t, sh(e, `umount -l `+e.ws))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mounts) != 1 || res.Mounts[0].Path != attest.Root || !strings.Contains(res.Mounts[0].Detail, "overlay") {
		t.Errorf("unmounted overlay: findings %+v", res.Mounts)
	}
}

func TestExitCodesAndSignals(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	if res, _, err := launch(t, sh(e, "exit 7")); err != nil || res.ExitCode != 7 || res.Signal != 0 {
		t.Errorf("exit 7: %+v, %v", res, err)
	}
	e = newEnv(t)
	if res, _, err := launch(t, sh(e, "kill -KILL $$")); err != nil || res.Signal != int(syscall.SIGKILL) || res.ExitCode != -1 {
		t.Errorf("killed: %+v, %v", res, err)
	}
}

func TestSignalForwarded(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	run, err := Start(sh(e, `trap 'exit 42' USR2; echo ready; while :; do sleep 0.05; done`), nil, w, agentStderr(t))
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("agent said %q, %v", buf, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait()
	if err != nil || res.ExitCode != 42 {
		t.Errorf("after SIGUSR2 to the supervisor: %+v, %v", res, err)
	}
}

// TestSignalWhileStarting: a signal that reaches the supervisor while the
// agent is being started is passed on once it has started, not lost (nor,
// with nothing yet registered for it, fatal to the supervisor).
func TestSignalWhileStarting(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	run, err := Start(sh(e, `trap 'exit 42' USR2; while :; do sleep 0.05; done`), nil, nil, agentStderr(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Ready(); err != nil {
		t.Fatal(err)
	}
	whileStarting = func() { syscall.Kill(os.Getpid(), syscall.SIGUSR2) }
	defer func() { whileStarting = nil }()
	if err := run.Go(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	timer := time.AfterFunc(20*time.Second, func() {
		select {
		case <-done:
		default:
			run.Kill()
		}
	})
	defer timer.Stop()
	res, err := run.Wait()
	close(done)
	// Exit 42 once the shell's trap is set; killed by SIGUSR2 if the
	// signal came before it was.
	if err != nil || res.ExitCode != 42 && res.Signal != int(syscall.SIGUSR2) {
		t.Errorf("a SIGUSR2 while the agent started did not reach it: %+v, %v", res, err)
	}
}

func TestCommandNotFound(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	_, _, err := launch(t, e.config("layerseal-no-such-command"))
	if !errors.Is(err, ErrCommandNotFound) {
		t.Errorf("missing command: %v", err)
	}
	e = newEnv(t)
	cfg := e.config("true")
	cfg.Process.Cwd = filepath.Join(e.ws, "missing")
	_, _, err = launch(t, cfg)
	if err == nil || errors.Is(err, ErrCommandNotFound) || !strings.Contains(err.Error(), "chdir") {
		t.Errorf("missing cwd: %v", err)
	}
}

func TestUserAndCapabilities(t *testing.T) {
	privtest.Require(t)
	e := newEnv(t)
	cfg := sh(e, `id -u; id -g; id -G; grep CapEff /proc/self/status`)
	cfg.Process.Cwd = "/"
	cfg.Process.User = specs.User{UID: 1234, GID: 2345, AdditionalGids: []uint32{3456}}
	cfg.Process.NoNewPrivileges = true
	cfg.Process.Capabilities = &specs.LinuxCapabilities{}
	res, out, err := launch(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := "1234\n2345\n2345 3456\nCapEff:\t0000000000000000\n"; out != want {
		t.Errorf("agent printed %q, want %q", out, want)
	}
	if res.CapSysAdmin {
		t.Error("CAP_SYS_ADMIN reported for an unprivileged agent")
	}

	admin := []string{"CAP_SYS_ADMIN"}
	e = newEnv(t)
	cfg.Workspace, cfg.Upper, cfg.Work, cfg.Hide = e.ws, e.upper, e.work, []string{e.state}
	cfg.Process.Capabilities = &specs.LinuxCapabilities{Bounding: admin, Permitted: admin, Inheritable: admin, Effective: admin, Ambient: admin}
	res, out, err = launch(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "CapEff:\t0000000000200000") {
		t.Errorf("agent with ambient CAP_SYS_ADMIN printed %q", out)
	}
	if !res.CapSysAdmin {
		t.Error("CAP_SYS_ADMIN granted but not reported")
	}
}

func TestCapSysAdmin(t *testing.T) {
	admin := []string{"CAP_SYS_ADMIN"}
	cases := []struct {
		p    specs.Process
		want bool
	}{
		{specs.Process{}, true},
		{specs.Process{User: specs.User{UID: 1}}, true},
		{specs.Process{User: specs.User{UID: 1}, NoNewPrivileges: true}, false},
		{specs.Process{User: specs.User{UID: 1}, Capabilities: &specs.LinuxCapabilities{Bounding: admin}}, true},
		{specs.Process{User: specs.User{UID: 1}, NoNewPrivileges: true, Capabilities: &specs.LinuxCapabilities{Bounding: admin}}, false},
		{specs.Process{NoNewPrivileges: true, Capabilities: &specs.LinuxCapabilities{Bounding: admin}}, true},
		{specs.Process{NoNewPrivileges: true, Capabilities: &specs.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}}, false},
		{specs.Process{User: specs.User{UID: 1}, NoNewPrivileges: true, Capabilities: &specs.LinuxCapabilities{Ambient: admin}}, true},
	}
	for i, c := range cases {
		if got := capSysAdmin(&c.p); got != c.want {
			t.Errorf("case %d %+v: %v, want %v", i, c.p, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Config{Workspace: "/w", Upper: "/s/u", Work: "/s/w", Process: specs.Process{Args: []string{"sh"}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Workspace = "/" },
		func(c *Config) { c.Upper = "/w/u" },
		func(c *Config) { c.Process.Args = nil },
		func(c *Config) { c.Hide = []string{"rel"} },
		func(c *Config) { c.Process.Capabilities = &specs.LinuxCapabilities{Bounding: []string{"CAP_NOPE"}} },
		func(c *Config) { c.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOPE"}} },
	}
	for i, f := range bad {
		c := good
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("case %d: accepted %+v", i, c)
		}
	}
}

func TestAudit(t *testing.T) {
	const table = `20 1 0:20 / /proc rw - proc proc rw
30 1 254:0 / /ws rw - overlay overlay rw,lowerdir=/ws,upperdir=/st/u,workdir=/st/w
31 1 0:40 / /st rw - tmpfs layerseal-hidden ro
32 30 0:41 / /ws/out ro - tmpfs layerseal-hidden ro
`
	parse := func(s string) []*mountinfo.Info {
		infos, err := mountinfo.GetMountsFromReader(strings.NewReader(s), nil)
		if err != nil {
			t.Fatal(err)
		}
		return infos
	}
	before := parse(table)
	if got := audit("/ws", []string{"/st", "/ws/out"}, before, parse(table)); len(got) != 0 {
		t.Errorf("unchanged table: %+v", got)
	}
	after := strings.Replace(table, "31 1 0:40 / /st rw - tmpfs layerseal-hidden ro\n", "", 1) +
		"33 30 0:42 / /ws/a\\040b rw - tmpfs x rw\n" + "34 1 0:43 / /wsx rw - tmpfs y rw\n"
	after = strings.Replace(after, "upperdir=/st/u", "upperdir=/st/v", 1)
	got := audit("/ws", []string{"/st", "/ws/out"}, before, parse(after))
	if len(got) != 3 || got[0].Path != "" || got[1].Path != attest.Root || got[2].Path != "a b" {
		t.Fatalf("findings %+v", got)
	}
	if !strings.Contains(got[0].Detail, "unmounted") || !strings.Contains(got[1].Detail, "overlay") || !strings.Contains(got[1].Detail, "upperdir=/st/v") {
		t.Errorf("findings %+v", got)
	}
}
