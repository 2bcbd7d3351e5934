package attest

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Egress is what the supervisor's proxy saw of the agent's connections to
// one destination (run --network proxy): a single connection, or, beyond
// the proxy's bound on records, every further connection to the same host,
// port and outcome folded into one record (Connections > 1).
//
// In a statement's predicate, member "egress" (after "logs"; omitted when
// the run had no proxy, or the proxy saw nothing) is an array of objects,
// one per record, and a checkpoint's predicate has the same member (after
// "log") with the records as they stood when it was taken. Each object
// has these members, all present but where said, in this order:
//
//	host         Bytes text: the host as the agent asked for it (a DNS
//	             name or an IP literal, lower-cased, without brackets); at
//	             most MaxEgressHost bytes
//	port         decimal string, 0 to 65535: the port asked for; 0 only in
//	             a refused record (a request that named none)
//	protocol     "connect" (HTTP CONNECT), "http" (a plain HTTP request
//	             through the proxy) or "socks5"
//	address      "IP:port" as netip.AddrPort spells it ("[IPv6]:port" for
//	             IPv6): the address the proxy connected to, or the first
//	             resolved address it refused; "" when nothing resolved
//	allowed      bool: the proxy connected
//	reason       Bytes text: why the proxy refused; "" exactly when allowed;
//	             at most MaxEgressReason bytes
//	sent         decimal string: bytes relayed from the agent to the
//	             destination
//	received     decimal string: bytes relayed back to the agent
//	first        RFC 3339 UTC time with nanoseconds, trailing zeros
//	             dropped: when the first connection was accepted
//	last         the same: when the last one ended (or the record was
//	             taken, while one is open); not before first
//	connections  decimal string, at least 1: the connections the record
//	             stands for
//
// For example:
//
//	"egress":[{"host":"example.com","port":"443","protocol":"connect",
//	  "address":"93.184.215.14:443","allowed":true,"reason":"",
//	  "sent":"517","received":"5120","first":"2026-12-03T16:40:01.5Z",
//	  "last":"2026-12-03T16:40:02.25Z","connections":"1"},
//	 {"host":"metadata.internal","port":"80","protocol":"http",
//	  "address":"169.254.169.254:80","allowed":false,
//	  "reason":"address in a link-local range","sent":"0","received":"0",
//	  "first":"2026-12-03T16:40:03Z","last":"2026-12-03T16:40:03Z",
//	  "connections":"1"}]
//
// (shown across lines here; the predicate is compact JSON.)
//
// The records are sorted by CompareEgress (host bytes, port, protocol,
// allowed before refused, reason, first) and no two compare equal; there
// are at most MaxEgressRecords. The member is decoded strictly, like the
// rest of the predicate, and covered by the signature (in a checkpoint,
// by its log leaf too: see CheckpointLeaf).
//
// Records only grow: each checkpoint's records, and the final
// statement's, hold every record of the checkpoint before (the same host,
// port, protocol, outcome, reason and first) with no fewer bytes either
// way, no fewer connections and a last no earlier (EgressExtends: the
// address may differ, as a folded record's may);
// VerifyChain and CheckStatementHead check it.
type Egress struct {
	// Host is the destination as the agent asked for it: a DNS name or an
	// IP literal, lower-cased, without brackets.
	Host string
	// Port is the destination port asked for.
	Port uint16
	// Protocol is how the agent asked: "connect" (HTTP CONNECT), "http"
	// (a plain HTTP request through the proxy) or "socks5".
	Protocol string
	// Address is the address the proxy connected to (IP:port), or the
	// first resolved address it refused; empty when nothing resolved.
	Address string
	// Allowed is true when the proxy connected; Reason says why not when
	// it refused (a host or port not allowed, an address in a private
	// range, a name that did not resolve, a malformed request, the
	// connection bound), and is empty when allowed.
	Allowed bool
	Reason  string
	// Sent and Received are the bytes relayed from the agent to the
	// destination and back (HTTP request and response headers relayed
	// count too).
	Sent, Received uint64
	// First and Last are when the first connection was accepted and the
	// last one ended (or the snapshot was taken, while it is open).
	First, Last time.Time
	// Connections is how many connections the record stands for, at
	// least 1.
	Connections uint64
}

// Bounds on egress records a verifier accepts.
const (
	MaxEgressRecords = 1 << 14
	MaxEgressHost    = 1024
	MaxEgressReason  = 1024
)

// Egress protocols.
const (
	EgressConnect = "connect"
	EgressHTTP    = "http"
	EgressSOCKS5  = "socks5"
)

// CompareEgress orders egress records as statements list them: by host
// bytes, port, protocol, allowed before refused, reason, then first.
// Records comparing equal are the same record (see EgressExtends).
func CompareEgress(a, b Egress) int {
	return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port),
		strings.Compare(a.Protocol, b.Protocol), compareAllowed(a.Allowed, b.Allowed),
		strings.Compare(a.Reason, b.Reason), a.First.Compare(b.First))
}

func compareAllowed(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// String is the record's destination and outcome, as show prints it:
// "example.com:443 connect allowed" or "10.0.0.1:22 socks5 refused
// (address in a private range)". Host and reason are not escaped.
func (e Egress) String() string {
	s := fmt.Sprintf("%s %s", hostPort(e.Host, e.Port), e.Protocol)
	if e.Allowed {
		return s + " allowed"
	}
	return s + " refused (" + e.Reason + ")"
}

// hostPort joins host and port, bracketing an IPv6 literal.
func hostPort(host string, port uint16) string {
	if strings.IndexByte(host, ':') >= 0 {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

type egressJSON struct {
	Host        Bytes  `json:"host"`
	Port        uint16 `json:"port,string"`
	Protocol    string `json:"protocol"`
	Address     string `json:"address"`
	Allowed     bool   `json:"allowed"`
	Reason      Bytes  `json:"reason"`
	Sent        uint64 `json:"sent,string"`
	Received    uint64 `json:"received,string"`
	First       string `json:"first"`
	Last        string `json:"last"`
	Connections uint64 `json:"connections,string"`
}

func egressToJSON(es []Egress) []egressJSON {
	var out []egressJSON
	for _, e := range es {
		out = append(out, egressJSON{Host: Bytes(e.Host), Port: e.Port, Protocol: e.Protocol, Address: e.Address,
			Allowed: e.Allowed, Reason: Bytes(e.Reason), Sent: e.Sent, Received: e.Received,
			First: formatTime(e.First), Last: formatTime(e.Last), Connections: e.Connections})
	}
	return out
}

func egressFromJSON(js []egressJSON) ([]Egress, error) {
	if len(js) > MaxEgressRecords {
		return nil, fmt.Errorf("%d egress records, over the limit of %d", len(js), MaxEgressRecords)
	}
	var out []Egress
	for i, j := range js {
		e := Egress{Host: string(j.Host), Port: j.Port, Protocol: j.Protocol, Address: j.Address,
			Allowed: j.Allowed, Reason: string(j.Reason), Sent: j.Sent, Received: j.Received, Connections: j.Connections}
		var err error
		if e.First, err = parseTime(fmt.Sprintf("egress record %d first", i+1), j.First); err != nil {
			return nil, err
		}
		if e.Last, err = parseTime(fmt.Sprintf("egress record %d last", i+1), j.Last); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Valid checks one record's values (see Egress for what they may be).
func (e *Egress) Valid() error {
	switch {
	case len(e.Host) > MaxEgressHost || strings.IndexByte(e.Host, 0) >= 0:
		return fmt.Errorf("egress host %.64q: over %d bytes, or holds NUL", e.Host, MaxEgressHost)
	case e.Protocol != EgressConnect && e.Protocol != EgressHTTP && e.Protocol != EgressSOCKS5:
		return fmt.Errorf("egress %s: protocol %q is not one of %q", hostPort(e.Host, e.Port), e.Protocol,
			[]string{EgressConnect, EgressHTTP, EgressSOCKS5})
	case e.Allowed && (e.Reason != "" || e.Port == 0 || e.Address == ""):
		return fmt.Errorf("egress %s: allowed with reason %q, port %d, address %q", hostPort(e.Host, e.Port), e.Reason, e.Port, e.Address)
	case !e.Allowed && e.Reason == "":
		return fmt.Errorf("egress %s: refused without a reason", hostPort(e.Host, e.Port))
	case len(e.Reason) > MaxEgressReason || strings.IndexByte(e.Reason, 0) >= 0:
		return fmt.Errorf("egress %s: reason %.64q over %d bytes, or holds NUL", hostPort(e.Host, e.Port), e.Reason, MaxEgressReason)
	case e.Connections == 0:
		return fmt.Errorf("egress %s: no connections", hostPort(e.Host, e.Port))
	case e.Last.Before(e.First):
		return fmt.Errorf("egress %s: last %s before first %s", hostPort(e.Host, e.Port), formatTime(e.Last), formatTime(e.First))
	}
	if e.Address != "" {
		if a, err := netip.ParseAddrPort(e.Address); err != nil || a.String() != e.Address {
			return fmt.Errorf("egress %s: address %q is not IP:port in its one spelling", hostPort(e.Host, e.Port), e.Address)
		}
	}
	if err := checkTime("egress first", e.First); err != nil {
		return err
	}
	return checkTime("egress last", e.Last)
}

// validateEgress checks every record, their number, and that they are
// sorted by CompareEgress with no two equal.
func validateEgress(es []Egress) error {
	if len(es) > MaxEgressRecords {
		return fmt.Errorf("%d egress records, over the limit of %d", len(es), MaxEgressRecords)
	}
	for i := range es {
		if err := es[i].Valid(); err != nil {
			return err
		}
		if i > 0 && CompareEgress(es[i-1], es[i]) >= 0 {
			return fmt.Errorf("egress records %s and %s not sorted and unique", es[i-1], es[i])
		}
	}
	return nil
}

// EgressExtends reports whether later (a later checkpoint's records, or
// the final statement's) extends earlier (a checkpoint's), both valid:
// every record of earlier has one in later that compares equal
// (CompareEgress), with no fewer bytes sent or received, no fewer connections and a last no earlier. It returns nil,
// or an error naming the first record that is missing or shrank. It costs
// one pass over both.
func EgressExtends(earlier, later []Egress) error {
	j := 0
	for _, e := range earlier {
		for j < len(later) && CompareEgress(later[j], e) < 0 {
			j++
		}
		if j == len(later) || CompareEgress(later[j], e) != 0 {
			return fmt.Errorf("egress record %s first seen %s is missing later", e, formatTime(e.First))
		}
		l := later[j]
		if l.Sent < e.Sent || l.Received < e.Received || l.Connections < e.Connections || l.Last.Before(e.Last) {
			return fmt.Errorf("egress record %s first seen %s shrank later (sent %d to %d, received %d to %d, connections %d to %d)",
				e, formatTime(e.First), e.Sent, l.Sent, e.Received, l.Received, e.Connections, l.Connections)
		}
	}
	return nil
}

// SortEgress sorts records by CompareEgress and merges records that
// compare equal (summing bytes and connections, keeping the latest last
// and the first address), so that they form a valid statement member.
func SortEgress(es []Egress) []Egress {
	es = slices.Clone(es)
	slices.SortStableFunc(es, CompareEgress)
	out := es[:0]
	for _, e := range es {
		if n := len(out); n > 0 && CompareEgress(out[n-1], e) == 0 {
			p := &out[n-1]
			p.Sent += e.Sent
			p.Received += e.Received
			p.Connections += e.Connections
			if e.Last.After(p.Last) {
				p.Last = e.Last
			}
			continue
		}
		out = append(out, e)
	}
	return out
}
