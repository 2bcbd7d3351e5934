package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/layerseal/layerseal/attest"
)

// upstream is a destination on the host's loopback: an HTTP server that
// answers every request with "hello" and remembers the headers it got.
type upstream struct {
	*httptest.Server
	port    uint16
	mu      sync.Mutex
	headers []http.Header
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.mu.Unlock()
		io.WriteString(w, "hello")
	}))
	t.Cleanup(u.Close)
	u.port = uint16(u.Listener.Addr().(*net.TCPAddr).Port)
	return u
}

// fakeDNS maps names to addresses; any other name does not resolve.
func fakeDNS(m map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, s := range m[host] {
			out = append(out, netip.MustParseAddr(s))
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s: no such host", host)
		}
		return out, nil
	}
}

// allows parses each value with ParseAllow.
func allows(t *testing.T, values ...string) []Allow {
	t.Helper()
	var out []Allow
	for _, v := range values {
		a, err := ParseAllow(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// startProxy serves a Proxy for cfg on a loopback port and returns it and
// its address. It is closed when t ends, and Serve must have returned nil.
func startProxy(t *testing.T, cfg Config) (*Proxy, string) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(l) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return p, l.Addr().String()
}

// exchange sends raw to the proxy and returns all it answers until it
// closes the connection.
func exchange(t *testing.T, proxyAddr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		c.Write(raw)
		c.(*net.TCPConn).CloseWrite()
	}()
	b, _ := io.ReadAll(c)
	return b
}

// connectVia opens a CONNECT tunnel to target and returns the connection
// and the proxy's status line and body (when it refused).
func connectVia(t *testing.T, proxyAddr, target string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return nil, resp
	}
	if br.Buffered() != 0 {
		t.Fatalf("%d bytes after the CONNECT response", br.Buffered())
	}
	return c, resp
}

// getOver makes a GET request for http://host/ over c and returns the
// body.
func getOver(t *testing.T, c net.Conn, host string) string {
	t.Helper()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// socksDial asks the proxy over SOCKS5 for a CONNECT to (atyp, addr,
// port) and returns the connection and the reply code.
func socksDial(t *testing.T, proxyAddr string, atyp byte, addr []byte, port uint16) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, atyp}
	if atyp == socksAtypDomain {
		req = append(req, byte(len(addr)))
	}
	req = append(req, addr...)
	req = binary.BigEndian.AppendUint16(req, port)
	c.Write(req)
	var reply [12]byte
	if _, err := io.ReadFull(c, reply[:12]); err != nil {
		t.Fatalf("SOCKS5 reply: %v", err)
	}
	if !bytes.Equal(reply[:2], []byte{5, 0}) || reply[2] != 5 || reply[4] != 0 {
		t.Fatalf("SOCKS5 reply % x: not a method choice then a reply", reply)
	}
	return c, reply[3]
}

// only returns the one record of recs, failing otherwise.
func only(t *testing.T, recs []attest.Egress) attest.Egress {
	t.Helper()
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1: %+v", len(recs), recs)
	}
	return recs[0]
}

// waitRecords waits until no connection is open and the proxy has at
// least n records.
func waitRecords(t *testing.T, p *Proxy, n int) []attest.Egress {
	return waitFor(t, p, n, func(recs []attest.Egress) int { return len(recs) })
}

// waitConns waits until no connection is open and the proxy's records
// stand for at least n connections.
func waitConns(t *testing.T, p *Proxy, n int) []attest.Egress {
	return waitFor(t, p, n, func(recs []attest.Egress) int {
		total := 0
		for _, r := range recs {
			total += int(r.Connections)
		}
		return total
	})
}

func waitFor(t *testing.T, p *Proxy, n int, count func([]attest.Egress) int) []attest.Egress {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		done := len(p.open) == 0
		p.mu.Unlock()
		recs := p.Records()
		if done && count(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records after 10 s, want %d: %+v", len(recs), n, recs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConnectAllowed(t *testing.T) {
	u := newUpstream(t)
	literal := "127.0.0.1:" + strconv.Itoa(int(u.port))
	p, addr := startProxy(t, Config{Allow: allows(t, literal)})
	c, resp := connectVia(t, addr, literal)
	if c == nil {
		t.Fatalf("CONNECT %s: %s", literal, resp.Status)
	}
	if got := getOver(t, c, literal); got != "hello" {
		t.Fatalf("through the tunnel: %q", got)
	}
	c.Close()
	r := only(t, waitRecords(t, p, 1))
	if !r.Allowed || r.Reason != "" || r.Protocol != "connect" || r.Host != "127.0.0.1" || r.Port != u.port ||
		r.Address != literal || r.Connections != 1 || r.Sent == 0 || r.Received == 0 || r.Last.Before(r.First) {
		t.Errorf("record %+v", r)
	}
}

func TestHTTPAllowed(t *testing.T) {
	u := newUpstream(t)
	literal := "127.0.0.1:" + strconv.Itoa(int(u.port))
	p, addr := startProxy(t, Config{Allow: allows(t, literal)})
	req := "GET http://" + literal + "/x?y=1 HTTP/1.1\r\nHost: " + literal + "\r\n" +
		"Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nX-Hop: 1\r\nConnection: X-Hop\r\nX-Kept: yes\r\n\r\n"
	out := string(exchange(t, addr, []byte(req)))
	if !strings.HasPrefix(out, "HTTP/1.1 200 ") || !strings.HasSuffix(out, "hello") {
		t.Fatalf("answer %q", out)
	}
	u.mu.Lock()
	h := u.headers[0]
	u.mu.Unlock()
	for _, name := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Hop", "User-Agent"} {
		if v, ok := h[name]; ok {
			t.Errorf("the destination got %s: %q", name, v)
		}
	}
	if h.Get("X-Kept") != "yes" {
		t.Errorf("the destination lacks X-Kept: %v", h)
	}
	r := only(t, waitRecords(t, p, 1))
	if !r.Allowed || r.Protocol != "http" || r.Address != literal || r.Sent == 0 || r.Received != uint64(len(out)) {
		t.Errorf("record %+v (answer of %d bytes)", r, len(out))
	}

	// Through Go's own client, as an agent's tool would use it.
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	resp, err := client.Get("http://" + literal + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hello" {
		t.Errorf("Go's client through the proxy: %q", b)
	}
}

func TestSOCKS5Allowed(t *testing.T) {
	u := newUpstream(t)
	literal := "127.0.0.1:" + strconv.Itoa(int(u.port))
	p, addr := startProxy(t, Config{
		Allow:   allows(t, literal, "svc.test:"+strconv.Itoa(int(u.port))),
		Resolve: fakeDNS(map[string][]string{"svc.test": {"127.0.0.1"}}),
	})
	d, err := proxy.SOCKS5("tcp", addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{literal, "svc.test:" + strconv.Itoa(int(u.port))} {
		c, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatalf("SOCKS5 to %s: %v", target, err)
		}
		if got := getOver(t, c, target); got != "hello" {
			t.Errorf("SOCKS5 to %s: %q", target, got)
		}
		c.Close()
	}
	recs := waitRecords(t, p, 2)
	for _, r := range recs {
		if !r.Allowed || r.Protocol != "socks5" || r.Address != literal || r.Sent == 0 || r.Received == 0 {
			t.Errorf("record %+v", r)
		}
	}
	if len(recs) != 2 || !slices.ContainsFunc(recs, func(r attest.Egress) bool { return r.Host == "svc.test" }) {
		t.Errorf("records %+v, want one for 127.0.0.1 and one for svc.test", recs)
	}
}

// A name that resolves to loopback is refused even though it was allowed,
// unless the literal address and port were allowed too.
func TestLoopbackNameNeedsLiteral(t *testing.T) {
	u := newUpstream(t)
	port := strconv.Itoa(int(u.port))
	dns := fakeDNS(map[string][]string{"svc.test": {"127.0.0.1"}})
	var refused []attest.Egress
	var mu sync.Mutex
	p, addr := startProxy(t, Config{Allow: allows(t, "svc.test:"+port), Resolve: dns, Refused: func(e attest.Egress) {
		mu.Lock()
		refused = append(refused, e)
		mu.Unlock()
	}})
	c, resp := connectVia(t, addr, "svc.test:"+port)
	if c != nil || resp.StatusCode != 403 {
		t.Fatalf("CONNECT svc.test:%s: %s, want 403", port, resp.Status)
	}
	body, _ := io.ReadAll(resp.Body)
	if want := "refused svc.test:" + port + ": address in a refused range: loopback"; !strings.Contains(string(body), want) {
		t.Errorf("body %q, want it to say %q", body, want)
	}
	if _, code := socksDial(t, addr, socksAtypDomain, []byte("svc.test"), u.port); code != socksNotAllowed {
		t.Errorf("SOCKS5 reply %d, want %d (not allowed)", code, socksNotAllowed)
	}
	// The literal itself was not allowed either.
	if _, code := socksDial(t, addr, socksAtypIPv4, []byte{127, 0, 0, 1}, u.port); code != socksNotAllowed {
		t.Errorf("SOCKS5 reply %d for the literal, want %d", code, socksNotAllowed)
	}
	recs := waitRecords(t, p, 3)
	for _, r := range recs[:2] {
		if r.Allowed || r.Reason != ReasonAddress+"loopback" || r.Address != "127.0.0.1:"+port || r.Host != "svc.test" {
			t.Errorf("record %+v", r)
		}
	}
	if r := recs[2]; r.Reason != ReasonHost || r.Host != "127.0.0.1" || r.Address != "" {
		t.Errorf("record %+v", r)
	}
	mu.Lock()
	if len(refused) != 3 {
		t.Errorf("Refused heard %d refusals, want 3: %+v", len(refused), refused)
	}
	mu.Unlock()

	// Allowing the literal address and port lets the name through.
	_, addr2 := startProxy(t, Config{Allow: allows(t, "svc.test:"+port, "127.0.0.1:"+port), Resolve: dns})
	c, resp = connectVia(t, addr2, "svc.test:"+port)
	if c == nil {
		t.Fatalf("CONNECT with the literal allowed: %s", resp.Status)
	}
	if got := getOver(t, c, "svc.test"); got != "hello" {
		t.Errorf("got %q", got)
	}
	// But not on another port of the same address.
	if c, resp := connectVia(t, addr2, "127.0.0.1:1"); c != nil || resp.StatusCode != 403 {
		t.Errorf("CONNECT 127.0.0.1:1: allowed")
	}
}

func TestRefusals(t *testing.T) {
	dns := fakeDNS(map[string][]string{
		"rebind.test":   {"93.184.216.34", "10.1.2.3"},
		"metadata.test": {"169.254.169.254"},
		"mapped.test":   {"::ffff:127.0.0.1"},
		"ula.test":      {"fd00::1"},
		"zoned.test":    {"fe80::1%lo"},
		"nat64.test":    {"64:ff9b::a00:1"},
	})
	p, addr := startProxy(t, Config{
		Allow: allows(t, "allowed.test", "*.rebind.test", "rebind.test", "metadata.test:80", "mapped.test", "ula.test", "zoned.test", "nat64.test", "gone.test",
			"[::1]:8443", "127.0.0.1:8443"),
		Resolve: dns,
	})
	cases := []struct {
		target string
		status int
		reason string
		addr   string
	}{
		{"allowed.test:22", 403, ReasonPort, ""},
		{"other.test:443", 403, ReasonHost, ""},
		{"www.allowed.test:443", 403, ReasonHost, ""},
		{"rebind.test:443", 403, ReasonAddress + "private", "10.1.2.3:443"},
		{"metadata.test:80", 403, ReasonAddress + "link-local", "169.254.169.254:80"},
		{"169.254.169.254:80", 403, ReasonHost, ""},
		{"mapped.test:443", 403, ReasonAddress + "loopback", "127.0.0.1:443"},
		{"ula.test:443", 403, ReasonAddress + "unique-local", "[fd00::1]:443"},
		{"zoned.test:443", 403, ReasonAddress + "link-local", "[fe80::1%lo]:443"},
		{"nat64.test:443", 403, ReasonAddress + "private", "[64:ff9b::a00:1]:443"},
		{"gone.test:443", 502, ReasonResolve, ""},
		{"[::1]:443", 403, ReasonPort, ""},
		{"[::ffff:127.0.0.1]:8443", 403, ReasonHost, ""},
	}
	for _, c := range cases {
		conn, resp := connectVia(t, addr, c.target)
		if conn != nil {
			t.Errorf("CONNECT %s: connected", c.target)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.reason) {
			t.Errorf("CONNECT %s: %s %q, want %d and %q", c.target, resp.Status, body, c.status, c.reason)
		}
	}
	recs := waitRecords(t, p, len(cases))
	for _, c := range cases {
		host, port, _ := net.SplitHostPort(c.target) // unbracketed, as records hold it
		i := slices.IndexFunc(recs, func(r attest.Egress) bool { return r.Host == host && strconv.Itoa(int(r.Port)) == port })
		if i < 0 {
			t.Errorf("no record for %s in %+v", c.target, recs)
			continue
		}
		if r := recs[i]; r.Allowed || r.Reason != c.reason || r.Address != c.addr || r.Protocol != "connect" || r.Sent != 0 || r.Received != 0 {
			t.Errorf("record for %s: %+v, want reason %q address %q", c.target, r, c.reason, c.addr)
		}
	}
}

// Requests the proxy cannot take get a refusal in their own protocol, and
// a record that holds no byte the agent chose unchecked.
func TestMalformed(t *testing.T) {
	cases := []struct {
		name     string
		raw      []byte
		answer   string // prefix of the answer
		reason   string
		protocol string
	}{
		{"garbage", []byte("\x16\x03\x01\x00\xa5hello\r\n\r\n"), "HTTP/1.1 400 ", ReasonMalformed, ""},
		{"origin form", []byte("GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n"), "HTTP/1.1 400 ", ReasonUnsupported, "http"},
		{"https URI", []byte("GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n"), "HTTP/1.1 400 ", ReasonUnsupported, "http"},
		{"ftp URI", []byte("GET ftp://a.test/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonUnsupported, "http"},
		{"bad host", []byte("CONNECT a_b!.test:443 HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonBadHost, "connect"},
		{"newline host", []byte("GET http://a%0a.test/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", "", ""},
		{"host ends in number", []byte("CONNECT 127.1:443 HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonBadHost, "connect"},
		{"zone", []byte("CONNECT [fe80::1%25lo]:443 HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonBadHost, "connect"},
		{"no port", []byte("CONNECT a.test HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonMalformed, "connect"},
		{"port 0", []byte("CONNECT a.test:0 HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonBadHost, "connect"},
		{"port too big", []byte("CONNECT a.test:65536 HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 ", ReasonBadHost, "connect"},
		{"long header", append([]byte("CONNECT a.test:443 HTTP/1.1\r\nX: "), bytes.Repeat([]byte("a"), 70<<10)...), "HTTP/1.1 431 ", ReasonTooLarge, ""},
		{"many headers", bytes.Repeat([]byte("X-A: b\r\n"), 10<<10), "HTTP/1.1 400 ", ReasonMalformed, ""},
		{"long request line", append([]byte("GET http://a.test/"), bytes.Repeat([]byte("a"), 70<<10)...), "HTTP/1.1 431 ", ReasonTooLarge, ""},
		{"socks no methods", []byte{5, 0}, "\x05\xff", ReasonSocksMethod, "socks5"},
		{"socks only password", []byte{5, 1, 2}, "\x05\xff", ReasonSocksMethod, "socks5"},
		{"socks bind", []byte{5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80}, "\x05\x00\x05\x07", ReasonSocksCommand, "socks5"},
		{"socks udp", []byte{5, 1, 0, 5, 3, 0, 1, 1, 2, 3, 4, 0, 80}, "\x05\x00\x05\x07", ReasonSocksCommand, "socks5"},
		{"socks address type", []byte{5, 1, 0, 5, 1, 0, 9, 1, 2, 3, 4, 0, 80}, "\x05\x00\x05\x08", ReasonSocksAddrType, "socks5"},
		{"socks version 4 request", []byte{5, 1, 0, 4, 1, 0, 1, 1, 2, 3, 4, 0, 80}, "\x05\x00\x05\x01", ReasonMalformed, "socks5"},
		{"socks bad name", append([]byte{5, 1, 0, 5, 1, 0, 3, 6}, "a\nb.cd\x01\xbb"...), "\x05\x00\x05\x04", ReasonBadHost, "socks5"},
		{"socks empty name", []byte{5, 1, 0, 5, 1, 0, 3, 0, 1, 187}, "\x05\x00\x05\x04", ReasonBadHost, "socks5"},
		{"socks short", []byte{5, 1, 0, 5, 1, 0, 3, 200, 'a'}, "\x05\x00", ReasonMalformed, "socks5"},
		{"socks port 0", []byte{5, 1, 0, 5, 1, 0, 3, 6, 'a', '.', 't', 'e', 's', 't', 0, 0}, "\x05\x00\x05\x02", ReasonHost, "socks5"},
		{"nothing", nil, "", ReasonNoRequest, ""},
		{"http host not allowed", []byte("GET http://b.test/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 403 ", ReasonHost, "http"},
		{"http port not allowed", []byte("GET http://a.test:8080/ HTTP/1.1\r\n\r\n"), "HTTP/1.1 403 ", ReasonPort, "http"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			p, addr := startProxy(t, Config{Allow: allows(t, "a.test")})
			got := exchange(t, addr, c.raw)
			if !bytes.HasPrefix(got, []byte(c.answer)) {
				t.Errorf("answer %q, want it to start %q", got, c.answer)
			}
			r := only(t, waitRecords(t, p, 1))
			if r.Allowed || (c.reason != "" && r.Reason != c.reason) || r.Protocol != c.protocol || r.Connections != 1 {
				t.Errorf("record %+v, want reason %q protocol %q", r, c.reason, c.protocol)
			}
			if h, err := parseHost(r.Host); r.Host != "" && (err != nil || h != r.Host) {
				t.Errorf("record host %q", r.Host)
			}
		})
	}
}

// A client that sends its request slowly is cut off after HeaderTimeout.
func TestSlowRequest(t *testing.T) {
	p, addr := startProxy(t, Config{Allow: allows(t, "a.test"), HeaderTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	go func() {
		io.WriteString(c, "CONNECT a.test:443 HTTP/1.1\r\n")
		for i := 0; i < 50; i++ {
			time.Sleep(50 * time.Millisecond)
			if _, err := io.WriteString(c, "X: y\r\n"); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(c)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cut off after %v", d)
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 408 ")) {
		t.Errorf("answer %q", b)
	}
	if r := only(t, waitRecords(t, p, 1)); r.Reason != ReasonTimeout {
		t.Errorf("record %+v", r)
	}
}

// Beyond MaxConns a connection is closed at once and recorded; the
// refusals fold once MaxRecords are kept.
func TestFlood(t *testing.T) {
	var mu sync.Mutex
	heard := 0
	p, addr := startProxy(t, Config{Allow: allows(t, "a.test"), MaxConns: 3, MaxRecords: 4, Refused: func(attest.Egress) {
		mu.Lock()
		heard++
		mu.Unlock()
	}})
	var held []net.Conn
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// Wait until the proxy holds the three.
	for deadline := time.Now().Add(10 * time.Second); ; {
		p.mu.Lock()
		n := len(p.open)
		p.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	const flood = 200
	for i := 0; i < flood; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection beyond the bound: read %d, %v; want it closed", n, err)
		}
		c.Close()
	}
	for _, c := range held {
		c.Close()
	}
	recs := waitRecords(t, p, 5)
	var total uint64
	for _, r := range recs {
		total += r.Connections
	}
	if total != flood+3 || len(recs) != 6 {
		t.Fatalf("%d records for %d connections, want 6 for %d: %+v", len(recs), total, flood+3, recs)
	}
	// Four refusals are kept on their own; the other refusals fold into
	// one record, and the held three, which finish last, into another.
	folded := map[string]uint64{}
	for _, r := range recs {
		if r.Connections > 1 {
			folded[r.Reason] = r.Connections
		}
	}
	if folded[ReasonTooMany] != flood-4 || folded[ReasonNoRequest] != 3 {
		t.Errorf("folded records %v, want %d refusals and 3 held", folded, flood-4)
	}
	mu.Lock()
	defer mu.Unlock()
	if heard != flood+3 {
		t.Errorf("Refused heard %d, want %d", heard, flood+3)
	}
}

// Beyond MaxRecords records fold per host, port, protocol and outcome,
// and beyond MaxRecords folded records into one per protocol and outcome.
func TestFolding(t *testing.T) {
	p, addr := startProxy(t, Config{Allow: allows(t, "a.test"), MaxRecords: 2})
	connect := func(target string) {
		if c, _ := connectVia(t, addr, target); c != nil {
			t.Fatalf("CONNECT %s: connected", target)
		}
	}
	for _, target := range []string{"b.test:1", "b.test:2", "b.test:1", "b.test:1", "c.test:1", "b.test:2", "d.test:1", "e.test:1"} {
		connect(target)
		waitRecords(t, p, 1)
	}
	recs := waitRecords(t, p, 5)
	type row struct {
		host string
		port uint16
		n    uint64
	}
	var got []row
	for _, r := range recs {
		got = append(got, row{r.Host, r.Port, r.Connections})
		if r.Reason != ReasonHost || r.Protocol != "connect" {
			t.Errorf("record %+v", r)
		}
	}
	want := []row{{"b.test", 1, 1}, {"b.test", 2, 1}, {"b.test", 1, 2}, {"c.test", 1, 1}, {"", 0, 3}}
	slices.SortFunc(got, func(a, b row) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	slices.SortFunc(want, func(a, b row) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
	if !slices.Equal(got, want) {
		t.Errorf("records %v, want %v", got, want)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].First.Before(recs[i-1].First) {
			t.Errorf("records not sorted by First: %+v", recs)
		}
	}
}

// Close ends open tunnels, records them, and returns.
func TestCloseWithOpenTunnels(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c) // an echo that never closes first
		}
	}()
	literal := l.Addr().String()
	p, err := New(Config{Allow: allows(t, literal)})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(pl) }()
	var tunnels []net.Conn
	for i := 0; i < 3; i++ {
		c, resp := connectVia(t, pl.Addr().String(), literal)
		if c == nil {
			t.Fatalf("CONNECT: %s", resp.Status)
		}
		io.WriteString(c, "ping")
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil || string(b) != "ping" {
			t.Fatalf("echo: %q, %v", b, err)
		}
		tunnels = append(tunnels, c)
	}
	open := p.Records()
	if len(open) != 3 || !open[0].Allowed || open[0].Last.Before(open[0].First) {
		t.Errorf("records while open: %+v", open)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with tunnels open")
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	for _, c := range tunnels {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(fmt.Sprint(err), "reset") {
			t.Errorf("tunnel after Close: %v, want it ended", err)
		}
	}
	recs := p.Records()
	if len(recs) != 3 {
		t.Fatalf("records after Close: %+v", recs)
	}
	for _, r := range recs {
		if !r.Allowed || r.Sent != 4 || r.Received != 4 || r.Last.Before(r.First) {
			t.Errorf("record %+v", r)
		}
	}
	if err := p.Serve(pl); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

func TestNewChecks(t *testing.T) {
	if _, err := New(Config{Allow: []Allow{{Host: "Example.com"}}}); err == nil {
		t.Error("New took a host not in canonical form")
	}
	if _, err := New(Config{Allow: []Allow{{Host: "*"}}}); err == nil {
		t.Error("New took \"*\"")
	}
	if _, err := New(Config{MaxConns: -1}); err == nil {
		t.Error("New took a negative bound")
	}
}

// FuzzRequest feeds arbitrary bytes to the proxy as a connection's
// request: it must answer or close, never panic, and record the
// connection with a host that is empty or a name it allowed.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		"CONNECT a.test:443 HTTP/1.1\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x03\x06a.test\x01\xbb",
		"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50",
		"\x05\x01\x00\x05\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x50",
	} {
		f.Add([]byte(s))
	}
	p, err := New(Config{
		Allow:         []Allow{{Host: "a.test"}, {Host: "127.0.0.1", Port: 1}},
		Resolve:       fakeDNS(map[string][]string{"a.test": {"10.0.0.1"}}),
		HeaderTimeout: 200 * time.Millisecond,
		MaxRecords:    64,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		client, server := net.Pipe()
		before := 0
		for _, r := range p.Records() {
			before += int(r.Connections)
		}
		p.accept(server)
		go func() {
			client.Write(raw)
		}()
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.Copy(io.Discard, client)
		client.Close()
		recs := waitConns(t, p, before+1)
		for _, r := range recs {
			if r.Host != "" && r.Host != "a.test" && r.Host != "127.0.0.1" {
				if _, err := parseHost(r.Host); err != nil || r.Allowed {
					t.Fatalf("record %+v", r)
				}
			}
		}
	})
}

// Resolving and connecting have their own time (DialTimeout), not what is
// left of HeaderTimeout once the request is read.
func TestSlowResolve(t *testing.T) {
	u := newUpstream(t)
	port := strconv.Itoa(int(u.port))
	slow := func(ctx context.Context, host string) ([]netip.Addr, error) {
		time.Sleep(400 * time.Millisecond)
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	p, addr := startProxy(t, Config{Allow: allows(t, "svc.test:"+port, "127.0.0.1:"+port), Resolve: slow, HeaderTimeout: 200 * time.Millisecond})
	c, resp := connectVia(t, addr, "svc.test:"+port)
	if c == nil {
		t.Fatalf("CONNECT after a slow lookup: %s", resp.Status)
	}
	if got := getOver(t, c, "svc.test"); got != "hello" {
		t.Errorf("got %q", got)
	}
	sc, code := socksDial(t, addr, socksAtypDomain, []byte("svc.test"), u.port)
	if code != socksOK {
		t.Errorf("SOCKS5 after a slow lookup: reply %d", code)
	}
	sc.Close()
	c.Close()
	for _, r := range waitRecords(t, p, 2) {
		if !r.Allowed {
			t.Errorf("record %+v", r)
		}
	}
}

// A plain HTTP exchange ends when the destination has answered and
// closed, even while the agent still owes part of its request body.
func TestHTTPEndsWithResponse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for line, err := br.ReadString('\n'); err == nil && line != "\r\n"; line, err = br.ReadString('\n') {
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	}()
	target := l.Addr().String()
	_, addr := startProxy(t, Config{Allow: allows(t, target)})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST http://%s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\n0123456789", target, target)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || !bytes.HasSuffix(b, []byte("\r\n\r\nok")) {
		t.Errorf("answer %q, %v; want the response, then the end", b, err)
	}
}
