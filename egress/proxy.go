package egress

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// Defaults for the zero values of Config's bounds.
const (
	DefaultMaxConns      = 256
	DefaultMaxRecords    = 1024
	DefaultHeaderTimeout = 10 * time.Second
	DefaultDialTimeout   = 10 * time.Second
)

// maxHeader bounds what the proxy reads of a request before it connects:
// an HTTP request line and its headers together, or a SOCKS5 greeting and
// request.
const maxHeader = 64 << 10

// maxAddrs bounds how many of a name's resolved addresses the proxy tries
// to connect to, one after another (it checks every one of them first).
const maxAddrs = 8

// Config is what a Proxy allows and how far it goes.
type Config struct {
	// Allow lists the destinations the agent may reach (see Allow); none
	// refuses every connection.
	Allow []Allow
	// Resolve looks a name up; nil means net.DefaultResolver.LookupNetIP
	// (network "ip").
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// MaxConns bounds the connections open at once; beyond it a
	// connection is closed as soon as it is accepted, and recorded as
	// refused. 0 means DefaultMaxConns.
	MaxConns int
	// MaxRecords bounds the records kept one per connection; beyond it a
	// connection folds into a record per host, port, protocol and outcome,
	// and beyond MaxRecords of those, into one per protocol and outcome
	// (Host "", Port 0). 0 means DefaultMaxRecords.
	MaxRecords int
	// HeaderTimeout bounds the time from accepting a connection to having
	// read its request; resolving and connecting then have DialTimeout.
	// 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// DialTimeout bounds resolving a name and connecting to one of its
	// addresses. 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// Refused, when set, is called with the record of each connection
	// the proxy did not relay (refused, or failed to connect), for the
	// run's output. It is called from the proxy's goroutines, possibly at
	// once from several, and for connections beyond MaxConns from Serve's
	// accept loop itself: it must return quickly.
	Refused func(attest.Egress)
}

// Proxy is an egress proxy: it relays the agent's connections to the
// destinations its Config allows, and records each one. Its methods may
// be called from several goroutines.
type Proxy struct {
	cfg     Config
	literal []netip.AddrPort // allowed IP literals and ports (port 0: 80 and 443)
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	open      map[*conn]struct{}
	kept      []attest.Egress
	folds     map[foldKey]*attest.Egress
	coarse    map[foldKey]*attest.Egress
}

// foldKey is what a folded record stands for.
type foldKey struct {
	host     string
	port     uint16
	protocol string
	allowed  bool
	reason   string
}

// conn is one accepted connection while the proxy handles it.
type conn struct {
	c          net.Conn
	up         net.Conn      // the destination, once connected; guarded by Proxy.mu
	rec        attest.Egress // guarded by Proxy.mu, but for Sent and Received
	known      bool          // rec names a destination; guarded by Proxy.mu
	sent, recv atomic.Uint64
}

// New returns a proxy for cfg, which it checks: every Allow must be as
// ParseAllow returns it, and the bounds must not be negative.
func New(cfg Config) (*Proxy, error) {
	p := &Proxy{
		listeners: map[net.Listener]struct{}{},
		open:      map[*conn]struct{}{},
		folds:     map[foldKey]*attest.Egress{},
		coarse:    map[foldKey]*attest.Egress{},
	}
	for _, a := range cfg.Allow {
		b, err := ParseAllow(a.String())
		if err != nil || b != a {
			return nil, fmt.Errorf("allowed destination %q is not in its canonical form (as ParseAllow returns it)", a.String())
		}
		if ip, isIP := hostIP(a.Host); isIP {
			p.literal = append(p.literal, netip.AddrPortFrom(ip.Unmap(), a.Port))
		}
	}
	cfg.Allow = slices.Clone(cfg.Allow)
	if cfg.MaxConns < 0 || cfg.MaxRecords < 0 || cfg.HeaderTimeout < 0 || cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("egress proxy bounds must not be negative (connections %d, records %d, header timeout %v, dial timeout %v)",
			cfg.MaxConns, cfg.MaxRecords, cfg.HeaderTimeout, cfg.DialTimeout)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxRecords == 0 {
		cfg.MaxRecords = DefaultMaxRecords
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Resolve == nil {
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	p.cfg = cfg
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// Serve accepts connections on l and handles each in its own goroutine:
// HTTP CONNECT, plain HTTP requests with an absolute URI, and SOCKS5
// (a connection whose first byte is 5). It returns nil once l is closed
// (by the caller or by Close), or the first error of Accept that is not
// a shortage of resources it can wait out. A proxy that is closed
// closes l and returns net.ErrClosed.
func (p *Proxy) Serve(l net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return net.ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.listeners, l)
		p.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !temporary(err) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
			}
			continue
		}
		backoff = 0
		p.accept(c)
	}
}

// temporary reports whether an Accept error is one to wait out: a
// shortage of descriptors or memory, or a connection that ended before
// it was accepted.
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// accept starts handling c, or refuses it when MaxConns are open.
func (p *Proxy) accept(c net.Conn) {
	now := stamp(time.Now())
	p.mu.Lock()
	if p.closed || len(p.open) >= p.cfg.MaxConns {
		rec := attest.Egress{Reason: ReasonTooMany, First: now, Last: now, Connections: 1}
		if p.closed {
			rec.Reason = ReasonClosed
		}
		p.place(rec)
		p.mu.Unlock()
		c.Close()
		if p.cfg.Refused != nil {
			p.cfg.Refused(rec)
		}
		return
	}
	cn := &conn{c: c, rec: attest.Egress{First: now, Connections: 1}}
	p.open[cn] = struct{}{}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.handle(cn)
		p.finish(cn)
	}()
}

// finish closes cn and files its record.
func (p *Proxy) finish(cn *conn) {
	cn.c.Close()
	p.mu.Lock()
	if cn.up != nil {
		cn.up.Close()
	}
	delete(p.open, cn)
	rec := cn.rec
	rec.Sent, rec.Received = cn.sent.Load(), cn.recv.Load()
	rec.Last = stamp(time.Now())
	p.place(rec)
	p.mu.Unlock()
	if !rec.Allowed && p.cfg.Refused != nil {
		p.cfg.Refused(rec)
	}
}

// place files a finished connection's record: on its own while fewer
// than MaxRecords are, then folded. p.mu is held.
func (p *Proxy) place(rec attest.Egress) {
	if len(p.kept) < p.cfg.MaxRecords {
		p.kept = append(p.kept, rec)
		return
	}
	k := foldKey{rec.Host, rec.Port, rec.Protocol, rec.Allowed, rec.Reason}
	if f := p.folds[k]; f != nil {
		fold(f, rec)
		return
	}
	if len(p.folds) < p.cfg.MaxRecords {
		p.folds[k] = &rec
		return
	}
	rec.Host, rec.Port, rec.Address = "", 0, ""
	k.host, k.port = "", 0
	if f := p.coarse[k]; f != nil {
		fold(f, rec)
		return
	}
	p.coarse[k] = &rec
}

// fold adds rec to the folded record f. f keeps its first address.
func fold(f *attest.Egress, rec attest.Egress) {
	f.Connections += rec.Connections
	f.Sent += rec.Sent
	f.Received += rec.Received
	if rec.First.Before(f.First) {
		f.First = rec.First
	}
	if rec.Last.After(f.Last) {
		f.Last = rec.Last
	}
}

// Records returns what the proxy saw so far: every finished connection's
// record, its folded records, and a record for each open connection that
// has named its destination (Last the time of the call; Sent and Received
// the bytes relayed so far, behind by at most one relay chunk of 1 MiB
// each way). Sorted by First, then Host, Port, Protocol, Reason and
// Address.
func (p *Proxy) Records() []attest.Egress {
	now := stamp(time.Now())
	p.mu.Lock()
	out := slices.Clone(p.kept)
	for _, f := range p.folds {
		out = append(out, *f)
	}
	for _, f := range p.coarse {
		out = append(out, *f)
	}
	for cn := range p.open {
		if !cn.known {
			continue
		}
		rec := cn.rec
		rec.Sent, rec.Received = cn.sent.Load(), cn.recv.Load()
		rec.Last = now
		out = append(out, rec)
	}
	p.mu.Unlock()
	slices.SortStableFunc(out, func(a, b attest.Egress) int {
		return cmp.Or(a.First.Compare(b.First), cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port),
			cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Reason, b.Reason), cmp.Compare(a.Address, b.Address))
	})
	return out
}

// Close stops serving: it closes every listener Serve is using, ends
// every open connection (each is recorded), and waits for the proxy's
// goroutines. Records still answers after Close.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cancel()
	for l := range p.listeners {
		l.Close()
	}
	for cn := range p.open {
		cn.c.Close()
		if cn.up != nil {
			cn.up.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// stamp returns t as a record holds it: UTC, without a monotonic reading.
func stamp(t time.Time) time.Time { return t.UTC().Round(0) }

// handle reads cn's request, connects it or refuses it, and relays.
func (p *Proxy) handle(cn *conn) {
	cn.c.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	lr := &io.LimitedReader{R: cn.c, N: maxHeader}
	br := bufio.NewReaderSize(lr, 4096)
	first, err := br.Peek(1)
	if err != nil {
		p.describe(cn, attest.Egress{Reason: readReason(err, lr)})
		return
	}
	if first[0] == 5 {
		p.socks(cn, br, lr)
	} else {
		p.http(cn, br, lr)
	}
}

// describe sets what is known of cn's destination and outcome.
func (p *Proxy) describe(cn *conn, d attest.Egress) {
	p.mu.Lock()
	cn.rec.Host, cn.rec.Port, cn.rec.Protocol = d.Host, d.Port, d.Protocol
	cn.rec.Address, cn.rec.Allowed, cn.rec.Reason = d.Address, d.Allowed, d.Reason
	cn.known = d.Protocol != "" && d.Host != ""
	p.mu.Unlock()
}

// readReason names why reading a request failed.
func readReason(err error, lr *io.LimitedReader) string {
	var ne net.Error
	switch {
	case lr.N <= 0:
		return ReasonTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET):
		return ReasonNoRequest
	}
	return ReasonMalformed
}

// refusal is why the proxy did not connect, in words and in the codes
// each protocol answers with.
type refusal struct {
	reason string
	status int  // HTTP status
	socks  byte // SOCKS5 reply code
}

// SOCKS5 reply codes (RFC 1928).
const (
	socksOK           = 0x00
	socksFailure      = 0x01
	socksNotAllowed   = 0x02
	socksNetUnreach   = 0x03
	socksHostUnreach  = 0x04
	socksRefused      = 0x05
	socksTTLExpired   = 0x06
	socksBadCommand   = 0x07
	socksBadAddrType  = 0x08
	socksNoAcceptable = 0xff
	socksMethodNoAuth = 0x00
	socksCmdConnect   = 0x01
	socksAtypIPv4     = 0x01
	socksAtypDomain   = 0x03
	socksAtypIPv6     = 0x04
	socksVersion      = 0x05
)

// The reasons a record gives for a refusal. Reasons for an address in a
// range the proxy refuses are ReasonAddress followed by the range's
// name ("address in a refused range: loopback"); reasons for a failed
// connection are ReasonConnect followed by what failed.
const (
	ReasonHost          = "host not allowed"
	ReasonPort          = "port not allowed"
	ReasonAddress       = "address in a refused range: "
	ReasonResolve       = "name did not resolve"
	ReasonConnect       = "connection failed: "
	ReasonMalformed     = "malformed request"
	ReasonBadHost       = "malformed host name"
	ReasonUnsupported   = "unsupported request"
	ReasonTooLarge      = "request header too large"
	ReasonTimeout       = "request timed out"
	ReasonNoRequest     = "no request"
	ReasonSocksMethod   = "no acceptable SOCKS5 authentication method"
	ReasonSocksCommand  = "SOCKS5 command not supported"
	ReasonSocksAddrType = "SOCKS5 address type not supported"
	ReasonTooMany       = "too many connections"
	ReasonClosed        = "proxy closed"
)

// connect checks host (canonical) and port against the allow list,
// resolves host, checks every address it resolves to, and connects to
// the first checked address that answers. It describes cn accordingly.
func (p *Proxy) connect(cn *conn, protocol, host string, port uint16) (net.Conn, *refusal) {
	d := attest.Egress{Host: host, Port: port, Protocol: protocol}
	refuse := func(r refusal) (net.Conn, *refusal) {
		d.Reason = r.reason
		p.describe(cn, d)
		return nil, &r
	}
	if !slices.ContainsFunc(p.cfg.Allow, func(a Allow) bool { return a.allows(host, port) }) {
		hostOK := slices.ContainsFunc(p.cfg.Allow, func(a Allow) bool {
			return Allow{Host: a.Host, Port: port}.allows(host, port)
		})
		if hostOK {
			return refuse(refusal{ReasonPort, 403, socksNotAllowed})
		}
		return refuse(refusal{ReasonHost, 403, socksNotAllowed})
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, isIP := hostIP(host); isIP {
		addrs = []netip.Addr{ip}
	} else {
		var err error
		addrs, err = p.cfg.Resolve(ctx, host)
		if err != nil || len(addrs) == 0 {
			return refuse(refusal{ReasonResolve, 502, socksHostUnreach})
		}
	}
	targets := make([]netip.AddrPort, 0, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() {
			return refuse(refusal{ReasonResolve, 502, socksHostUnreach})
		}
		a = a.Unmap()
		if a.Is6() && a.Zone() != "" {
			// A zone names an interface of this host: link-local.
			d.Address = netip.AddrPortFrom(a, port).String()
			return refuse(refusal{ReasonAddress + "link-local", 403, socksNotAllowed})
		}
		ap := netip.AddrPortFrom(a, port)
		if kind := addressKind(a); kind != "" && !p.literalAllowed(ap) {
			d.Address = ap.String()
			return refuse(refusal{ReasonAddress + kind, 403, socksNotAllowed})
		}
		targets = append(targets, ap)
	}
	var dialer net.Dialer
	var lastErr error
	for _, ap := range targets[:min(len(targets), maxAddrs)] {
		d.Address = ap.String()
		up, err := dialer.DialContext(ctx, "tcp", ap.String())
		if err != nil {
			lastErr = err
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			up.Close()
			return refuse(refusal{ReasonClosed, 503, socksFailure})
		}
		cn.up = up
		p.mu.Unlock()
		d.Allowed = true
		p.describe(cn, d)
		return up, nil
	}
	return refuse(dialRefusal(lastErr))
}

// literalAllowed reports whether an IP literal and port were allowed.
func (p *Proxy) literalAllowed(ap netip.AddrPort) bool {
	for _, l := range p.literal {
		if l.Addr() == ap.Addr() && (Allow{Port: l.Port()}).allowsPort(ap.Port()) {
			return true
		}
	}
	return false
}

// dialRefusal names why connecting failed.
func dialRefusal(err error) refusal {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return refusal{ReasonConnect + "refused", 502, socksRefused}
	case errors.Is(err, context.Canceled):
		return refusal{ReasonClosed, 503, socksFailure}
	case errors.As(err, &ne) && ne.Timeout():
		return refusal{ReasonConnect + "timed out", 504, socksTTLExpired}
	case errors.Is(err, syscall.ENETUNREACH):
		return refusal{ReasonConnect + "network unreachable", 502, socksNetUnreach}
	case errors.Is(err, syscall.EHOSTUNREACH):
		return refusal{ReasonConnect + "host unreachable", 502, socksHostUnreach}
	}
	return refusal{ReasonConnect + "error", 502, socksFailure}
}

// relayChunk is how much one splice run relays before the live byte
// counts are brought up to date.
const relayChunk = 1 << 20

// relay copies src to dst, counting into n, until src ends or an error.
// Between TCP connections the copy is splice(2), with no copy through
// this process's memory.
func relay(dst, src net.Conn, n *atomic.Uint64) error {
	for {
		k, err := io.CopyN(dst, src, relayChunk)
		n.Add(uint64(k))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// tunnel relays between the agent and the destination both ways, after
// sending on what the agent sent beyond its request (in br). Each way
// ends with a half close when its source ends; an error ends both.
func tunnel(cn *conn, br *bufio.Reader, up net.Conn) {
	cn.c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		k, err := up.Write(b)
		cn.sent.Add(uint64(k))
		if err != nil {
			return
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if relay(cn.c, up, &cn.recv) != nil {
			cn.c.Close()
			up.Close()
			return
		}
		closeWrite(cn.c)
	}()
	if relay(up, cn.c, &cn.sent) != nil {
		cn.c.Close()
		up.Close()
	} else {
		closeWrite(up)
	}
	<-done
}

// closeWrite half-closes c when it can, and closes it otherwise.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
