package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/internal/linux"
	"github.com/layerseal/layerseal/internal/privtest"
)

// reachEnv makes the test binary, run as the agent, open an AF_PACKET
// socket and connect to the abstract unix socket named by its one argument
// (sending "hi"), and print "packet ERRNO" and "abstract ERRNO" (0 for
// success).
const reachEnv = "LAYERSEAL_TEST_REACH"

func init() {
	if os.Getenv(reachEnv) != "1" || len(os.Args) != 2 {
		return
	}
	errno := func(err error) int {
		var e syscall.Errno
		switch {
		case err == nil:
			return 0
		case errors.As(err, &e):
			return int(e)
		}
		return -1
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	if err == nil {
		unix.Close(fd)
	}
	fmt.Printf("packet %d\n", errno(err))
	c, err := net.Dial("unix", os.Args[1])
	if err == nil {
		_, err = c.Write([]byte("hi"))
		c.Close()
	}
	fmt.Printf("abstract %d\n", errno(err))
	os.Exit(0)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestRunNetworkReach: through the CLI, a root agent with the default
// capabilities sharing the host's network cannot open an AF_PACKET socket
// (no CAP_NET_RAW) and, where the kernel has Landlock ABI 6, cannot
// connect to an abstract unix socket of the host's, which receives nothing;
// without ABI 6 it connects, as the README's Limits say, and the launch
// record says it was not scoped. With --network none it keeps CAP_NET_RAW
// (its packet socket sees only its own namespace). The statement has no
// sandbox reason either way, and show of the launch record says what was
// in force.
func TestRunNetworkReach(t *testing.T) {
	e := newEnv(t)
	pub, err := attest.LoadPublicKey(e.pub)
	if err != nil {
		t.Fatal(err)
	}
	abi, abiErr := linux.LandlockABI()
	scoped := abiErr == nil && abi >= 6
	t.Logf("Landlock ABI %d (%v): scoping expected %v", abi, abiErr, scoped)
	for _, network := range []string{"host", "none"} {
		name, _, hostHeard := privtest.AbstractSockets(t)
		out := filepath.Join(e.dir, "out-"+network)
		code, text := e.run(out, `"$TOOL" "$NAME"`, append(testBinaryRO(), "--network", network,
			"--env", reachEnv+"=1", "--env", "TOOL="+os.Args[0], "--env", "NAME="+name)...)
		heard := hostHeard()
		if code != 0 {
			t.Fatalf("--network %s: exit %d: %s", network, code, text)
		}
		// EPERM is 1, ECONNREFUSED 111.
		packet, abstract, wantHeard := "1", "0", []string{"stream hi"}
		switch {
		case network == "none":
			packet, abstract, wantHeard = "0", "111", nil
		case scoped:
			abstract, wantHeard = "1", nil
		}
		if want := "packet " + packet + "\nabstract " + abstract + "\n"; !strings.Contains(text, want) {
			t.Errorf("--network %s: the agent printed %q, want %q", network, text, want)
		}
		if !slices.Equal(heard, wantHeard) {
			t.Errorf("--network %s: the host's abstract socket received %q, want %q", network, heard, wantHeard)
		}
		b, err := os.ReadFile(filepath.Join(out, "launch.json"))
		if err != nil {
			t.Fatal(err)
		}
		lr, err := attest.VerifyLaunch(b, pub)
		if err != nil {
			t.Fatal(err)
		}
		var wantScopes []string
		if scoped {
			wantScopes = []string{"abstract_unix_socket", "signal"}
		}
		if !slices.Equal(lr.Sandbox.Scoped, wantScopes) || len(lr.Sandbox.Missing) != 0 {
			t.Errorf("--network %s: launch record scoped %q, missing %q; want scoped %q, nothing missing", network, lr.Sandbox.Scoped, lr.Sandbox.Missing, wantScopes)
		}
		if got := slices.Contains(lr.Agent.Capabilities.Bounding, "CAP_NET_RAW"); got != (network == "none") {
			t.Errorf("--network %s: the agent's bounding set %q", network, lr.Agent.Capabilities.Bounding)
		}
		wantShow := map[bool]string{
			true:  "landlock scopes abstract_unix_socket, signal\n",
			false: map[string]string{"host": "no landlock scopes (the agent could connect to the host's abstract unix sockets)\n", "none": "no landlock scopes\n"}[network],
		}[scoped]
		wantShow = "sandbox: network " + network + ", seccomp default, " + wantShow
		if c, so, se := e.cli("show", "--key", e.pub, filepath.Join(out, "launch.json")); c != 0 || !strings.Contains(so, wantShow) {
			t.Errorf("show of the launch record: exit %d, want a line %q:\n%s%s", c, wantShow, so, se)
		}
		st, err := os.ReadFile(filepath.Join(out, "statement.json"))
		if err != nil {
			t.Fatal(err)
		}
		statement, err := attest.VerifyStatement(st, pub, b)
		if err != nil {
			t.Fatal(err)
		}
		// Complete but where the kernel lacks mount IDs (the kernel
		// matrix's statx-less pass): never a sandbox reason.
		for _, r := range statement.Incomplete {
			if r.Code == attest.SandboxWeakened {
				t.Errorf("--network %s: incomplete: %+v", network, r)
			}
		}
	}
}

// TestScopesText: show of a launch record says which Landlock scopes were
// in force, and under the host's network what their absence left open.
func TestScopesText(t *testing.T) {
	for _, c := range []struct {
		sb   attest.Sandbox
		want string
	}{
		{attest.Sandbox{Network: "host", Scoped: []string{"abstract_unix_socket", "signal"}}, "landlock scopes abstract_unix_socket, signal"},
		{attest.Sandbox{Network: "host"}, "no landlock scopes (the agent could connect to the host's abstract unix sockets)"},
		{attest.Sandbox{Network: "none"}, "no landlock scopes"},
	} {
		if got := scopesText(c.sb); got != c.want {
			t.Errorf("%+v: %q, want %q", c.sb, got, c.want)
		}
	}
}
