package nsrun

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/privtest"
)

// reachEnv makes the test binary, run as the agent, try what the Landlock
// scopes refuse and print one line each: "host-stream", "host-dgram"
// (connect to the abstract sockets named by its first two arguments, and
// send "hi"), "kill-init" (signal 0 to the namespace's init), then "own"
// (a child of its own connects to an abstract socket it listens on), each
// followed by the errno (0 for success).
const reachEnv = "NSRUN_TEST_REACH"

func init() {
	if os.Getenv(reachEnv) == "1" {
		os.Exit(reach(os.Args[1], os.Args[2]))
	}
}

func reach(stream, dgram string) int {
	errno := func(err error) int {
		var e syscall.Errno
		if err == nil {
			return 0
		}
		if errors.As(err, &e) {
			return int(e)
		}
		return -1
	}
	send := func(network, name string) error {
		c, err := net.Dial(network, name)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hi"))
		return err
	}
	fmt.Printf("host-stream %d\n", errno(send("unix", stream)))
	fmt.Printf("host-dgram %d\n", errno(send("unixgram", dgram)))
	fmt.Printf("kill-init %d\n", errno(unix.Kill(1, 0)))
	own := stream + "-own"
	l, err := net.Listen("unix", own)
	if err != nil {
		fmt.Printf("own listen %v\n", err)
		return 1
	}
	child := exec.Command("/proc/self/exe", own)
	child.Env = []string{connectEnv + "=1"}
	out, err := child.Output()
	if err != nil || string(out) != "connected "+own+"\n" {
		fmt.Printf("own child %q %v\n", out, err)
		return 1
	}
	l.(*net.UnixListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := l.Accept()
	if err == nil {
		c.Close()
	}
	fmt.Printf("own %d\n", errno(err))
	return 0
}

// TestScopedAbstractSockets: an agent sharing the host's network cannot
// connect or send to an abstract unix socket of the host's (which receives
// nothing) nor signal its init, while two processes of its own still talk
// over an abstract socket; the sandbox says it was scoped. On a kernel
// without Landlock ABI 6 (before Linux 6.12, or Landlock off) it asserts
// what the README documents instead: the sandbox says not scoped, the
// connection and the datagram reach the host. With --network none the
// scopes are in force the same way, and for an agent of another uid
// without no_new_privs too.
func TestScopedAbstractSockets(t *testing.T) {
	privtest.Require(t)
	abi, abiErr := linux.LandlockABI()
	scoped := abiErr == nil && abi >= scopeABI
	t.Logf("Landlock ABI %d (%v): scoping expected %v", abi, abiErr, scoped)
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, network string
		root          bool
	}{{"host", "host", true}, {"none", "none", true}, {"host-uid-1234-without-no-new-privs", "host", false}} {
		network := c.network
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			stream, dgram, heard := privtest.AbstractSockets(t)
			// The agent is the test binary, in the workspace so that any
			// uid reaches it.
			for _, d := range []string{filepath.Dir(filepath.Dir(e.ws)), filepath.Dir(e.ws)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			agent := filepath.Join(e.ws, "reach")
			if err := os.WriteFile(agent, self, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := rootAgent(e.config(agent, stream, dgram))
			if !c.root {
				// Scoped while the stage is still privileged, as the
				// kernel requires without no_new_privs.
				cfg.Process.NoNewPrivileges = false
				cfg.Process.User = specs.User{UID: 1234, GID: 1234}
				cfg.Process.Capabilities = &specs.LinuxCapabilities{}
			}
			cfg.Process.Env = []string{reachEnv + "=1"}
			cfg.Sandbox.Network = network
			run, ready, r := start(t, cfg)
			out, _ := io.ReadAll(r)
			res, err := run.Wait()
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("agent: %+v, %v; printed %q", res, err, out)
			}
			wantScopes := []string(nil)
			if scoped {
				wantScopes = []string{"abstract_unix_socket", "signal"}
			}
			if !slices.Equal(ready.Sandbox.Scoped, wantScopes) || len(ready.Sandbox.Missing) != 0 {
				t.Errorf("sandbox scoped %q, missing %q: want scoped %q, nothing missing", ready.Sandbox.Scoped, ready.Sandbox.Missing, wantScopes)
			}
			// EPERM (1) where the scopes refuse; in a network namespace of
			// its own the host's names do not exist (ECONNREFUSED, 111).
			host, kill := "0", "0"
			var wantHeard []string
			switch {
			case network == "none":
				host = "111"
			case scoped:
				host = "1"
			default:
				wantHeard = []string{"dgram hi", "stream hi"}
			}
			if scoped || !c.root {
				kill = "1" // without scopes, for want of CAP_KILL
			}
			want := "host-stream " + host + "\nhost-dgram " + host + "\nkill-init " + kill + "\nown 0\n"
			if string(out) != want {
				t.Errorf("agent printed\n%s\nwant\n%s", out, want)
			}
			got := heard()
			slices.Sort(got)
			if !slices.Equal(got, wantHeard) {
				t.Errorf("the host's abstract sockets received %q, want %q", got, wantHeard)
			}
		})
	}
}

// TestLandlockScopeDecision: the scopes follow the kernel's Landlock ABI,
// asked of the kernel, and are recorded as they are requested.
func TestLandlockScopeDecision(t *testing.T) {
	defer func(f func() (int, error)) { landlockABI = f }(landlockABI)
	for _, c := range []struct {
		abi   int
		err   error
		flags uint64
	}{
		{0, fmt.Errorf("landlock_create_ruleset: %w", unix.ENOSYS), 0},
		{0, fmt.Errorf("landlock_create_ruleset: %w", unix.EOPNOTSUPP), 0},
		{3, nil, 0},
		{5, nil, 0},
		{6, nil, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL},
		{7, nil, unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL},
	} {
		landlockABI = func() (int, error) { return c.abi, c.err }
		sb := attest.Sandbox{Scoped: []string{"stale"}}
		flags := landlockScope(&sb)
		want := []string(nil)
		if c.flags != 0 {
			want = []string{"abstract_unix_socket", "signal"}
		}
		if flags != c.flags || !slices.Equal(sb.Scoped, want) {
			t.Errorf("ABI %d, %v: flags %#x, scoped %q; want %#x, %q", c.abi, c.err, flags, sb.Scoped, c.flags, want)
		}
	}
}
