package nsrun

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerseal/layerseal/internal/privtest"
)

const ifacesEnv = "LAYERSEAL_TEST_IFACES" // "1": print the network interfaces and exit

func init() {
	if os.Getenv(ifacesEnv) != "1" {
		return
	}
	ifs, err := net.Interfaces()
	if err != nil {
		fmt.Println("interfaces:", err)
		os.Exit(1)
	}
	for _, i := range ifs {
		fmt.Printf("iface %s %s\n", i.Name, i.Flags)
	}
	os.Exit(0)
}

// TestNamespaces: the agent has IPC, UTS, cgroup (and with network "none",
// network) namespaces of its own, the host name "layerseal", and with
// network "none" only a loopback interface, up. The launch record says so.
func TestNamespaces(t *testing.T) {
	privtest.Require(t)
	host := map[string]string{}
	for _, ns := range []string{"ipc", "uts", "cgroup", "net"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		host[ns] = l
	}
	tl := tool(t)
	for _, network := range []string{"", "host", "none"} {
		t.Run("network="+network, func(t *testing.T) {
			e := newEnv(t)
			cfg := sh(e, `for n in ipc uts cgroup net; do echo "$n $(readlink /proc/self/ns/$n)"; done; echo "hostname $(hostname)"; "$TOOL"`)
			cfg.Sandbox.Network = network
			cfg.Process.Env = []string{"PATH=/usr/bin:/bin", "TOOL=" + tl, ifacesEnv + "=1"}
			cfg.Sandbox.ReadOnly = []string{filepath.Dir(tl)}
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			run, err := Start(cfg, nil, w, agentStderr(t))
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			ready, err := run.Ready()
			if err != nil {
				t.Fatal(err)
			}
			if err := run.Go(); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, 64<<10)
			n, _ := readAll(r, out)
			r.Close()
			if res, err := run.Wait(); err != nil || res.ExitCode != 0 {
				t.Fatalf("run: %+v, %v\n%s", res, err, out[:n])
			}
			want := []string{"cgroup", "ipc", "mount", "pid", "uts"}
			wantNet := "host"
			if network == "none" || network == "" { // "" means "none"
				want, wantNet = []string{"cgroup", "ipc", "mount", "net", "pid", "uts"}, "none"
			}
			if !slices.Equal(ready.Sandbox.Namespaces, want) || ready.Sandbox.Network != wantNet {
				t.Errorf("launch record: namespaces %q network %q, want %q %q", ready.Sandbox.Namespaces, ready.Sandbox.Network, want, wantNet)
			}
			var ifaces []string
			for _, line := range strings.Split(strings.TrimSpace(string(out[:n])), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 2 && f[0] == "hostname":
					if f[1] != hostname {
						t.Errorf("the agent's host name is %q, want %q", f[1], hostname)
					}
				case len(f) == 3 && f[0] == "iface":
					ifaces = append(ifaces, f[1]+" "+f[2])
				case len(f) == 2:
					shared := host[f[0]] == f[1]
					if shared != (f[0] == "net" && wantNet == "host") {
						t.Errorf("namespace %s: the agent's %s, the host's %s", f[0], f[1], host[f[0]])
					}
				default:
					t.Errorf("unexpected line %q", line)
				}
			}
			if wantNet == "none" && (len(ifaces) != 1 || !strings.HasPrefix(ifaces[0], "lo up|")) {
				t.Errorf("the agent's interfaces are %q, want only lo, up", ifaces)
			}
		})
	}
}

// readAll reads r into buf until EOF or buf is full.
func readAll(r *os.File, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
