// Command egress measures a download from a server on the host's loopback
// (a file of -size MiB served with sendfile, warm in the page cache),
// side by side in one run: straight from the server, and through an
// egress proxy (the one `run --network proxy` serves) by HTTP CONNECT, by
// SOCKS5 and as a plain HTTP request. The client reads each body into
// io.Discard the same way. The rows run in a new random order each round;
// the table gives medians and minima of the wall time, the throughput,
// the ratios to the direct download (the goal: within 1.2x), and the
// machine's core count.
//
// Run as root, it also times the download made by an agent launched as
// `layerseal run` launches it (nsrun), once with the host's network,
// straight to the server, and once with network "proxy", by CONNECT to
// 127.0.0.1:3128 in its own network namespace, served by the proxy in the
// supervisor: the agent times its own download, so start-up is left out.
//
// Usage: go run ./bench/egress [-size 256] [-rounds 10] [-sandbox=true]
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/nsrun"
)

// agentEnv makes the binary, started as the agent, download and print the
// time it took.
const agentEnv = "BENCH_EGRESS_AGENT"

func main() {
	nsrun.Init()
	if os.Getenv(agentEnv) == "1" {
		agent(os.Args[1], os.Args[2])
		return
	}
	size := flag.Int("size", 256, "MiB downloaded")
	rounds := flag.Int("rounds", 10, "downloads of each kind")
	sandbox := flag.Bool("sandbox", os.Geteuid() == 0, "also time an agent's download in a sandbox (needs root)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "bench-egress-")
	check(err)
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "blob")
	f, err := os.Create(file)
	check(err)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	for range *size {
		_, err := f.Write(chunk)
		check(err)
	}
	check(f.Close())
	want := int64(*size) << 20

	sl, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	go http.Serve(sl, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, file) }))
	target := sl.Addr().String()

	allow, err := egress.ParseAllow(target)
	check(err)
	p, err := egress.New(egress.Config{Allow: []egress.Allow{allow}})
	check(err)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	go p.Serve(pl)
	defer p.Close()
	proxy := pl.Addr().String()

	rows := []struct {
		name string
		dial func() (net.Conn, error)
		path string
	}{
		{"direct", func() (net.Conn, error) { return net.Dial("tcp", target) }, "/"},
		{"proxy, HTTP CONNECT", func() (net.Conn, error) { return viaConnect(proxy, target) }, "/"},
		{"proxy, SOCKS5", func() (net.Conn, error) { return viaSOCKS5(proxy, sl.Addr().(*net.TCPAddr)) }, "/"},
		{"proxy, plain HTTP", func() (net.Conn, error) { return net.Dial("tcp", proxy) }, "http://" + target + "/"},
	}
	type row struct {
		name string
		get  func() time.Duration
	}
	var table []row
	for _, r := range rows {
		table = append(table, row{r.name, func() time.Duration {
			start := time.Now()
			c, err := r.dial()
			check(err)
			n, err := download(c, target, r.path)
			check(err)
			if n != want {
				check(fmt.Errorf("%s: %d bytes, want %d", r.name, n, want))
			}
			return time.Since(start)
		}})
	}
	if *sandbox {
		sb := newSandbox(dir)
		table = append(table,
			row{"agent, network host", func() time.Duration { return sb.download("host", target) }},
			row{"agent, network proxy", func() time.Duration { return sb.download("proxy", target) }})
	}
	times := make([][]time.Duration, len(table))
	for _, r := range table {
		r.get() // warm up: the page cache, the connections' first use
	}
	for range *rounds {
		for _, i := range rand.Perm(len(table)) {
			times[i] = append(times[i], table[i].get())
		}
	}
	direct := median(times[0])
	fmt.Printf("%d rounds of %d MiB from a loopback server, %d cores\n", *rounds, *size, runtime.NumCPU())
	fmt.Printf("| %-22s | %9s | %7s | %8s | %8s |\n", "download", "median ms", "min ms", "MB/s", "/direct")
	fmt.Printf("| %-22s | %9s | %7s | %8s | %8s |\n", "---", "---:", "---:", "---:", "---:")
	for i, r := range table {
		m := median(times[i])
		fmt.Printf("| %-22s | %9.1f | %7.1f | %8.0f | %7.2fx |\n", r.name, ms(m), ms(slices.Min(times[i])),
			float64(want)/1e6/m.Seconds(), m.Seconds()/direct.Seconds())
	}
	if *sandbox {
		n := len(table)
		fmt.Printf("agent rows: the download as the agent timed it; network proxy / network host %.2fx (goal: at most 1.2x)\n",
			median(times[n-1]).Seconds()/median(times[n-2]).Seconds())
	}
	recs := p.Records()
	var relayed uint64
	for _, r := range recs {
		if !r.Allowed {
			check(fmt.Errorf("refused: %+v", r))
		}
		relayed += r.Received
	}
	fmt.Printf("the proxy recorded %d connections, %d MiB relayed to the client\n", len(recs), relayed>>20)
}

// sandbox is a workspace holding a copy of this binary, the agent, and a
// state dir for the overlay's upper and work dirs.
type sandbox struct {
	ws, state, agent string
	n                int
}

func newSandbox(dir string) *sandbox {
	sb := &sandbox{ws: filepath.Join(dir, "ws"), state: filepath.Join(dir, "state")}
	check(os.Mkdir(sb.ws, 0o755))
	check(os.Mkdir(sb.state, 0o700))
	self, err := os.ReadFile("/proc/self/exe")
	check(err)
	sb.agent = filepath.Join(sb.ws, "agent")
	check(os.WriteFile(sb.agent, self, 0o755))
	return sb
}

// download launches the agent with the network given, which downloads
// from target (straight, or through the proxy with network "proxy"), and
// returns the time the download took it.
func (sb *sandbox) download(network, target string) time.Duration {
	sb.n++
	upper, work := filepath.Join(sb.state, fmt.Sprint("u", sb.n)), filepath.Join(sb.state, fmt.Sprint("w", sb.n))
	check(os.Mkdir(upper, 0o755))
	check(os.Mkdir(work, 0o755))
	defer os.RemoveAll(upper)
	defer os.RemoveAll(work)
	cfg := nsrun.Config{Workspace: sb.ws, Upper: upper, Work: work, Hide: []string{sb.state},
		Process: specs.Process{Args: []string{sb.agent, network, target}, Env: []string{agentEnv + "=1"}},
		Sandbox: nsrun.Sandbox{Network: network}}
	r, w, err := os.Pipe()
	check(err)
	defer r.Close()
	run, err := nsrun.Start(cfg, nil, w, os.Stderr)
	w.Close()
	check(err)
	out := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	_, err = run.Ready()
	check(err)
	var p *egress.Proxy
	if l := run.ProxyListener(); l != nil {
		allow, err := egress.ParseAllow(target)
		check(err)
		p, err = egress.New(egress.Config{Allow: []egress.Allow{allow}})
		check(err)
		go p.Serve(l)
	}
	check(run.Go())
	res, err := run.Wait()
	check(err)
	b := <-out
	if p != nil {
		p.Close()
	}
	if res.ExitCode != 0 {
		check(fmt.Errorf("agent with network %s: exit %d: %s", network, res.ExitCode, b))
	}
	us, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	check(err)
	return time.Duration(us) * time.Microsecond
}

// agent downloads from target, straight (network "host") or through the
// proxy port (network "proxy"), and prints the microseconds it took.
func agent(network, target string) {
	start := time.Now()
	var c net.Conn
	var err error
	if network == "proxy" {
		c, err = viaConnect("127.0.0.1:"+strconv.Itoa(nsrun.ProxyPort), target)
	} else {
		c, err = net.Dial("tcp", target)
	}
	check(err)
	_, err = download(c, target, "/")
	check(err)
	fmt.Println(time.Since(start).Microseconds())
}

// download sends GET path over c (closing it after the response) and
// reads the body into io.Discard, returning its length.
func download(c net.Conn, host, path string) (int64, error) {
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 64<<10), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return io.Copy(io.Discard, resp.Body)
}

// viaConnect opens a tunnel to target through the proxy with CONNECT.
func viaConnect(proxy, target string) (net.Conn, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	want := "HTTP/1.1 200 Connection established\r\n\r\n"
	b := make([]byte, len(want))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != want {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %q, %v", target, b, err)
	}
	return c, nil
}

// viaSOCKS5 opens a connection to target through the proxy with SOCKS5.
func viaSOCKS5(proxy string, target *net.TCPAddr) (net.Conn, error) {
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		return nil, err
	}
	req := append([]byte{5, 1, 0, 5, 1, 0, 1}, target.IP.To4()...)
	req = binary.BigEndian.AppendUint16(req, uint16(target.Port))
	c.Write(req)
	b := make([]byte, 12)
	if _, err := io.ReadFull(c, b); err != nil || b[1] != 0 || b[3] != 0 {
		c.Close()
		return nil, fmt.Errorf("SOCKS5 to %s: % x, %v", target, b, err)
	}
	return c, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(d))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/egress:", err)
		os.Exit(1)
	}
}
