package egress

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"time"

	"github.com/layerseal/layerseal/attest"
)

// socksRequest is a parsed SOCKS5 request (RFC 1928, section 4).
type socksRequest struct {
	cmd  byte
	host string // canonical (parseHost)
	port uint16
}

// readSocksGreeting reads the version and method list and reports whether
// "no authentication" is among the methods. The caller has seen that the
// first byte is 5.
func readSocksGreeting(br *bufio.Reader) (noAuth bool, err error) {
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return false, err
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return false, err
	}
	for _, m := range methods {
		if m == socksMethodNoAuth {
			return true, nil
		}
	}
	return false, nil
}

// errSocks is a SOCKS5 request the proxy cannot read: its reply code and
// the reason recorded.
type errSocks struct {
	code   byte
	reason string
}

func (e *errSocks) Error() string { return e.reason }

// readSocksRequest reads a request: VER CMD RSV ATYP DST.ADDR DST.PORT. A
// request it cannot take is an *errSocks; a short read is the read's error.
func readSocksRequest(br *bufio.Reader) (socksRequest, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return socksRequest{}, err
	}
	if hdr[0] != socksVersion || hdr[2] != 0 {
		return socksRequest{}, &errSocks{socksFailure, ReasonMalformed}
	}
	r := socksRequest{cmd: hdr[1]}
	switch hdr[3] {
	case socksAtypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return r, err
		}
		r.host = netip.AddrFrom4(b).String()
	case socksAtypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return r, err
		}
		r.host = netip.AddrFrom16(b).String()
	case socksAtypDomain:
		n, err := br.ReadByte()
		if err != nil {
			return r, err
		}
		name := make([]byte, n)
		if _, err := io.ReadFull(br, name); err != nil {
			return r, err
		}
		h, err := parseHost(string(name))
		if err != nil || n == 0 {
			// Read the port anyway, so the reply is not mistaken for a
			// short read.
			io.ReadFull(br, make([]byte, 2))
			return r, &errSocks{socksHostUnreach, ReasonBadHost}
		}
		r.host = h
	default:
		return r, &errSocks{socksBadAddrType, ReasonSocksAddrType}
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return r, err
	}
	r.port = binary.BigEndian.Uint16(pb[:])
	if r.cmd != socksCmdConnect {
		return r, &errSocks{socksBadCommand, ReasonSocksCommand}
	}
	return r, nil
}

// socksReply writes a reply with the given code and an unspecified bound
// address (the proxy does not tell the agent its own address).
func socksReply(cn *conn, code byte) error {
	cn.c.SetWriteDeadline(time.Now().Add(refusalTimeout))
	_, err := cn.c.Write([]byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// socks handles a SOCKS5 connection.
func (p *Proxy) socks(cn *conn, br *bufio.Reader, lr *io.LimitedReader) {
	d := attest.Egress{Protocol: "socks5"}
	noAuth, err := readSocksGreeting(br)
	if err != nil {
		d.Reason = readReason(err, lr)
		p.describe(cn, d)
		return
	}
	if !noAuth {
		d.Reason = ReasonSocksMethod
		p.describe(cn, d)
		cn.c.SetWriteDeadline(time.Now().Add(refusalTimeout))
		cn.c.Write([]byte{socksVersion, socksNoAcceptable})
		return
	}
	if _, err := cn.c.Write([]byte{socksVersion, socksMethodNoAuth}); err != nil {
		d.Reason = readReason(err, lr)
		p.describe(cn, d)
		return
	}
	req, err := readSocksRequest(br)
	if err != nil {
		d.Host, d.Port = req.host, req.port
		if e, ok := err.(*errSocks); ok {
			d.Reason = e.reason
			p.describe(cn, d)
			socksReply(cn, e.code)
			return
		}
		d.Reason = readReason(err, lr)
		p.describe(cn, d)
		return
	}
	cn.c.SetDeadline(time.Time{}) // the request is read
	up, ref := p.connect(cn, "socks5", req.host, req.port)
	if ref != nil {
		socksReply(cn, ref.socks)
		return
	}
	lr.N = 1<<63 - 1
	if socksReply(cn, socksOK) != nil {
		return
	}
	tunnel(cn, br, up)
}
