package layerseal

import (
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/nsrun"
)

// TestCheckNetwork: on the proxied network the agent's environment names
// the proxy in upper and lower case, but for what the caller set; an
// allow list with another network is refused, naming both.
func TestCheckNetwork(t *testing.T) {
	cfg := RunConfig{
		Process:  specs.Process{Args: []string{"a"}, Env: []string{"PATH=/bin", "https_proxy=http://mine:1"}},
		Sandbox:  nsrun.Sandbox{Network: NetworkProxy},
		AllowNet: []egress.Allow{{Host: "example.com"}},
	}
	if err := checkNetwork(&cfg); err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/bin", "https_proxy=http://mine:1", "HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
		"ALL_PROXY=socks5h://127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1,::1", "http_proxy=http://127.0.0.1:3128",
		"all_proxy=socks5h://127.0.0.1:3128", "no_proxy=localhost,127.0.0.1,::1"}
	if !slices.Equal(cfg.Process.Env, want) {
		t.Errorf("env %q\nwant %q", cfg.Process.Env, want)
	}
	// An allowed loopback address is the host's: NO_PROXY leaves out its
	// family's loopback, so that tools take the proxy to it.
	for _, c := range []struct {
		allow egress.Allow
		want  string
	}{{egress.Allow{Host: "127.0.0.1", Port: 8080}, "NO_PROXY=::1"}, {egress.Allow{Host: "::1", Port: 80}, "NO_PROXY=localhost,127.0.0.1"},
		{egress.Allow{Host: "10.0.0.1", Port: 80}, "NO_PROXY=localhost,127.0.0.1,::1"}} {
		lo := RunConfig{Process: specs.Process{Args: []string{"a"}}, Sandbox: nsrun.Sandbox{Network: NetworkProxy}, AllowNet: []egress.Allow{c.allow}}
		if err := checkNetwork(&lo); err != nil || !slices.Contains(lo.Process.Env, c.want) {
			t.Errorf("allowing %s: env %q, want %s (%v)", c.allow, lo.Process.Env, c.want, err)
		}
	}
	def := RunConfig{Process: specs.Process{Args: []string{"a"}}, Sandbox: nsrun.Sandbox{Network: NetworkProxy}}
	if err := checkNetwork(&def); err != nil || !slices.Contains(def.Process.Env, "all_proxy=socks5h://127.0.0.1:3128") ||
		!slices.ContainsFunc(def.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		t.Errorf("default env: %q, %v", def.Process.Env, err)
	}
	for _, network := range []string{"", NetworkNone, NetworkHost} {
		c := RunConfig{Process: specs.Process{Args: []string{"a"}}, Sandbox: nsrun.Sandbox{Network: network},
			AllowNet: []egress.Allow{{Host: "127.0.0.1", Port: 8080}}}
		err := checkNetwork(&c)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:8080") || !strings.Contains(err.Error(), `not "`+orNone(network)+`"`) {
			t.Errorf("allow list with network %q: %v", network, err)
		}
		if c.Process.Env != nil {
			t.Errorf("network %q: env %q", network, c.Process.Env)
		}
	}
	if got := allowList([]egress.Allow{{Host: "b.example"}, {Host: "a.example", Port: 1}, {Host: "b.example"}}); !slices.Equal(got, []string{"a.example:1", "b.example"}) {
		t.Errorf("allow list %q", got)
	}
}

// TestDefaultProcessNetRaw: root keeps CAP_NET_RAW in a namespace of its
// own (none, the default, and proxy), not on the host's network.
func TestDefaultProcessNetRaw(t *testing.T) {
	for network, want := range map[string]bool{NetworkNone: true, NetworkProxy: true, NetworkHost: false, "": true} {
		p := DefaultProcess([]string{"a"}, 0, 0, network)
		if got := slices.Contains(p.Capabilities.Bounding, "CAP_NET_RAW"); got != want {
			t.Errorf("network %q: CAP_NET_RAW %v, want %v", network, got, want)
		}
	}
}
