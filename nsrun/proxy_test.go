package nsrun

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/internal/privtest"
)

// proxyEnv makes the test binary act as an agent that tries the network:
// it lists the sockets it holds, tries to bind the proxy port, connects
// straight to the address in its first argument, then through the proxy
// port with CONNECT, and prints a line for each.
const proxyEnv = "LAYERSEAL_TEST_PROXY"

func init() {
	if os.Getenv(proxyEnv) != "1" {
		return
	}
	target := os.Args[1]
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, "socket:") {
			fmt.Println("holds socket", e.Name())
		}
	}
	if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort)); err == nil {
		fmt.Println("bound the proxy port")
		l.Close()
	}
	if c, err := net.DialTimeout("tcp", target, 2*time.Second); err == nil {
		fmt.Println("direct connected")
		c.Close()
	} else {
		fmt.Println("direct refused")
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(ProxyPort), 2*time.Second)
	if err != nil {
		fmt.Println("proxy refused")
		os.Exit(0)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	fmt.Println("proxy says", strings.TrimSpace(line))
	for line != "\r\n" && line != "" {
		line, _ = br.ReadString('\n')
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fmt.Println("get:", err)
		os.Exit(0)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Println("body", string(b))
	os.Exit(0)
}

// TestProxyNetwork: with network "proxy" the agent has a network of its
// own where 127.0.0.1:ProxyPort is served by the supervisor (here an
// egress proxy allowing one host loopback server), and it reaches that
// server only through it; the agent holds no socket, and cannot take the
// port. With network "none" there is no listener, and nothing answers.
func TestProxyNetwork(t *testing.T) {
	privtest.Require(t)
	hostLoopback(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "from the host")
	}))
	defer srv.Close()
	target := srv.Listener.Addr().String()
	tl := tool(t)
	for _, network := range []string{"proxy", "none", "host"} {
		t.Run("network="+network, func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config(tl, target)
			cfg.Sandbox.Network = network
			cfg.Sandbox.ReadOnly = []string{filepath.Dir(tl)}
			cfg.Process.Env = []string{"PATH=/usr/bin:/bin", proxyEnv + "=1"}
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
			if _, err := run.Ready(); err != nil {
				t.Fatal(err)
			}
			var p *egress.Proxy
			served := make(chan error, 1)
			l := run.ProxyListener()
			if (l != nil) != (network == "proxy") {
				t.Fatalf("network %s: proxy listener %v", network, l)
			}
			if l != nil {
				if got := l.Addr().String(); got != "127.0.0.1:"+strconv.Itoa(ProxyPort) {
					t.Errorf("proxy listener on %s", got)
				}
				allow, err := egress.ParseAllow(target)
				if err != nil {
					t.Fatal(err)
				}
				p, err = egress.New(egress.Config{Allow: []egress.Allow{allow}})
				if err != nil {
					t.Fatal(err)
				}
				go func() { served <- p.Serve(l) }()
			}
			if err := run.Go(); err != nil {
				run.Abort()
				t.Fatal(err)
			}
			res, err := run.Wait()
			got := <-out
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("run: %+v, %v\n%s", res, err, got)
			}
			want := map[string]string{
				"proxy": "direct refused\nproxy says HTTP/1.1 200 Connection established\nbody from the host\n",
				"none":  "bound the proxy port\ndirect refused\nproxy refused\n",
				"host":  "bound the proxy port\ndirect connected\n", // and whatever the host has on the proxy port
			}[network]
			if got != want && !(network == "host" && strings.HasPrefix(got, want)) {
				t.Errorf("the agent printed\n%s\nwant\n%s", got, want)
			}
			if p == nil {
				return
			}
			if err := <-served; err != nil {
				t.Errorf("Serve after Wait: %v", err)
			}
			p.Close()
			recs := p.Records()
			if len(recs) != 1 || !recs[0].Allowed || recs[0].Address != target || recs[0].Received == 0 {
				t.Errorf("proxy records %+v", recs)
			}
		})
	}
}

// hostLoopback makes sure the test's own loopback interface is up: the
// kernel matrix's guests leave it down. It is put down again when the
// test ends, so the guest's other tests see it as before.
func hostLoopback(t *testing.T) {
	t.Helper()
	ifi, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if ifi.Flags&net.FlagUp != 0 {
		return
	}
	t.Log("the loopback interface is down (a kernel matrix guest): bringing it up for the test")
	if err := setLoopback(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setLoopback(false); err != nil {
			t.Error(err)
		}
	})
}

// setLoopback sets or clears IFF_UP on "lo".
func setLoopback(up bool) error {
	if up {
		return loopbackUp()
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() &^ unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
