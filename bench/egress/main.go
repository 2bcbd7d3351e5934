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
// Usage: go run ./bench/egress [-size 256] [-rounds 10]
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
	"time"

	"github.com/layerseal/layerseal/egress"
)

func main() {
	size := flag.Int("size", 256, "MiB downloaded")
	rounds := flag.Int("rounds", 10, "downloads of each kind")
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
	times := make([][]time.Duration, len(rows))
	get := func(i int) time.Duration {
		start := time.Now()
		c, err := rows[i].dial()
		check(err)
		n, err := download(c, target, rows[i].path)
		check(err)
		if n != want {
			check(fmt.Errorf("%s: %d bytes, want %d", rows[i].name, n, want))
		}
		return time.Since(start)
	}
	for i := range rows {
		get(i) // warm up: the page cache, the connections' first use
	}
	for range *rounds {
		for _, i := range rand.Perm(len(rows)) {
			times[i] = append(times[i], get(i))
		}
	}
	direct := median(times[0])
	fmt.Printf("%d rounds of %d MiB from a loopback server, %d cores\n", *rounds, *size, runtime.NumCPU())
	fmt.Printf("| %-22s | %9s | %7s | %8s | %8s |\n", "download", "median ms", "min ms", "MB/s", "/direct")
	fmt.Printf("| %-22s | %9s | %7s | %8s | %8s |\n", "---", "---:", "---:", "---:", "---:")
	for i, r := range rows {
		m := median(times[i])
		fmt.Printf("| %-22s | %9.1f | %7.1f | %8.0f | %7.2fx |\n", r.name, ms(m), ms(slices.Min(times[i])),
			float64(want)/1e6/m.Seconds(), m.Seconds()/direct.Seconds())
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
