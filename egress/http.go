package egress

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// httpTarget is what an HTTP request through the proxy asks for.
type httpTarget struct {
	protocol string // "connect" or "http"
	host     string // canonical (parseHost)
	port     uint16
}

// parseHTTPTarget reads where req goes: the authority of a CONNECT
// (HOST:PORT, port required) or the host of an absolute http:// URI (port
// 80 unless given). A refusal has the reason and HTTP status to answer.
func parseHTTPTarget(req *http.Request) (httpTarget, *refusal) {
	t := httpTarget{protocol: "http"}
	authority := req.URL.Host
	if req.Method == http.MethodConnect {
		t.protocol = "connect"
		authority = req.RequestURI
	} else {
		switch {
		case req.URL.Scheme == "https":
			return t, &refusal{ReasonUnsupported, 400, socksFailure}
		case req.URL.Scheme != "http" || req.URL.Host == "":
			return t, &refusal{ReasonUnsupported, 400, socksFailure}
		}
	}
	host, port, err := splitHostPort(authority)
	if err != nil {
		return t, &refusal{ReasonBadHost, 400, socksFailure}
	}
	if port == 0 {
		if t.protocol == "connect" {
			return t, &refusal{ReasonMalformed, 400, socksFailure}
		}
		port = 80
	}
	h, err := parseHost(host)
	if err != nil {
		return t, &refusal{ReasonBadHost, 400, socksFailure}
	}
	t.host, t.port = h, port
	return t, nil
}

// http handles a CONNECT or a plain HTTP request.
func (p *Proxy) http(cn *conn, br *bufio.Reader, lr *io.LimitedReader) {
	req, err := http.ReadRequest(br)
	if err != nil {
		r := readReason(err, lr)
		p.describe(cn, attest.Egress{Reason: r})
		switch r {
		case ReasonNoRequest:
		case ReasonTooLarge:
			writeRefusal(cn, 431, "", 0, r)
		case ReasonTimeout:
			writeRefusal(cn, 408, "", 0, r)
		default:
			writeRefusal(cn, 400, "", 0, r)
		}
		return
	}
	// The request is read: the header deadline is over, and connecting
	// has its own.
	cn.c.SetDeadline(time.Time{})
	t, ref := parseHTTPTarget(req)
	if ref != nil {
		p.describe(cn, attest.Egress{Host: t.host, Port: t.port, Protocol: t.protocol, Reason: ref.reason})
		writeRefusal(cn, ref.status, "", 0, ref.reason)
		return
	}
	up, ref := p.connect(cn, t.protocol, t.host, t.port)
	if ref != nil {
		writeRefusal(cn, ref.status, t.host, t.port, ref.reason)
		return
	}
	lr.N = math.MaxInt64
	if t.protocol == "connect" {
		if _, err := io.WriteString(cn.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		tunnel(cn, br, up)
		return
	}
	// One request per connection: the destination is asked to close after
	// its response, which is relayed as it comes until it does; then the
	// agent's side is half closed too.
	stripHopByHop(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // not Go's default
	}
	req.Close = true
	done := make(chan struct{})
	go func() {
		defer close(done)
		if relay(cn.c, up, &cn.recv) != nil {
			cn.c.Close()
			return
		}
		closeWrite(cn.c)
	}()
	if err := req.Write(&countingWriter{up, &cn.sent}); err != nil {
		up.Close()
	}
	<-done
}

// stripHopByHop removes the headers meant for the proxy and the
// connection to it, not the destination: those Connection names, and the
// standard hop-by-hop and Proxy-* headers.
func stripHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"} {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(textproto.CanonicalMIMEHeaderKey(name), "Proxy-") {
			delete(h, name)
		}
	}
}

// refusalTimeout bounds writing a refusal to an agent that does not read.
const refusalTimeout = 2 * time.Second

// writeRefusal answers an HTTP request the proxy refuses: the status and
// a plain-text body that says why.
func writeRefusal(cn *conn, status int, host string, port uint16, reason string) {
	cn.c.SetWriteDeadline(time.Now().Add(refusalTimeout))
	body := "layerseal egress proxy: refused: " + reason + "\n"
	if host != "" {
		body = fmt.Sprintf("layerseal egress proxy: refused %s: %s\n", Allow{Host: host, Port: port}.String(), reason)
	}
	fmt.Fprintf(cn.c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}

// countingWriter counts what it writes into n.
type countingWriter struct {
	w io.Writer
	n *atomic.Uint64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	c.n.Add(uint64(k))
	return k, err
}
