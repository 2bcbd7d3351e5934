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
//	             most MaxEgressHost bytes; "" when the request named none
//	             the proxy accepted, and in a record that folds
//	             connections to many hosts (with port 0, address "")
//	port         decimal string, 0 to 65535: the port asked for; 0 when
//	             host is ""
//	protocol     "connect" (HTTP CONNECT), "http" (a plain HTTP request
//	             through the proxy) or "socks5"; "" only in a refused
//	             record (the connection was refused before a request was
//	             read: too many connections, no request, a malformed one)
//	address      "IP:port" as netip.AddrPort spells it ("[IPv6]:port" for
//	             IPv6): the address the proxy connected to, or the first
//	             resolved address it refused; "" when nothing resolved (and
//	             when host is "")
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
// Records only grow. A record's key is its host, port, protocol, outcome
// and reason; its group, its protocol, outcome and reason. From one
// checkpoint to the next, and from the last checkpoint to the final
// statement, for each key the connections, bytes sent and bytes received
// of its records (summed) never decrease, except that what a key loses
// may move to the folded record of its group (host "", port 0), which
// must then have grown by at least as much (the proxy folds connections
// beyond its bound into that record, the one still open included). A
// record's first and last may change as it folds. VerifyChain and
// CheckStatementHead check this (EgressExtends).
type Egress struct {
	// Host is the destination as the agent asked for it: a DNS name or an
	// IP literal, lower-cased, without brackets. It is empty when the
	// request named no valid host, and in a record that folds connections
	// to many hosts (see package egress).
	Host string
	// Port is the destination port asked for.
	Port uint16
	// Protocol is how the agent asked: "connect" (HTTP CONNECT), "http"
	// (a plain HTTP request through the proxy) or "socks5"; empty when the
	// proxy refused the connection before it could tell (beyond its bound
	// on connections, or a request it could not read).
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
	case e.Protocol != EgressConnect && e.Protocol != EgressHTTP && e.Protocol != EgressSOCKS5 && (e.Allowed || e.Protocol != ""):
		return fmt.Errorf("egress %s: protocol %q is not one of %q", hostPort(e.Host, e.Port), e.Protocol,
			[]string{EgressConnect, EgressHTTP, EgressSOCKS5})
	case e.Host == "" && (e.Port != 0 || e.Address != ""):
		return fmt.Errorf("egress record without a host has port %d, address %q", e.Port, e.Address)
	case e.Allowed && (e.Reason != "" || e.Host != "" && (e.Port == 0 || e.Address == "")):
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
// for each key (host, port, protocol, outcome, reason) the sums of
// connections, bytes sent and bytes received do not decrease, but for
// what moved to the folded record (host "", port 0) of the same
// protocol, outcome and reason, which grew by at least that much. It
// returns nil, or an error naming a key whose records shrank. It costs
// O(n log n) in the records.
func EgressExtends(earlier, later []Egress) error {
	type key struct {
		host     string
		port     uint16
		protocol string
		allowed  bool
		reason   string
	}
	add := func(m map[key]*sums, e Egress) {
		k := key{e.Host, e.Port, e.Protocol, e.Allowed, e.Reason}
		if m[k] == nil {
			m[k] = &sums{}
		}
		m[k][0] += e.Connections
		m[k][1] += e.Sent
		m[k][2] += e.Received
	}
	before, after := map[key]*sums{}, map[key]*sums{}
	for _, e := range earlier {
		add(before, e)
	}
	for _, e := range later {
		add(after, e)
	}
	group := func(k key) key { return key{protocol: k.protocol, allowed: k.allowed, reason: k.reason} }
	lost := map[key]*sums{} // per group: what its keys lost
	keys := make([]key, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return CompareEgress(Egress{Host: a.host, Port: a.port, Protocol: a.protocol, Allowed: a.allowed, Reason: a.reason},
			Egress{Host: b.host, Port: b.port, Protocol: b.protocol, Allowed: b.allowed, Reason: b.reason})
	})
	what := [3]string{"connections", "bytes sent", "bytes received"}
	for _, k := range keys {
		b, a := before[k], after[k]
		if a == nil {
			a = &sums{}
		}
		g := group(k)
		for i := range b {
			if a[i] >= b[i] {
				continue
			}
			if k == g {
				return fmt.Errorf("egress records of %s: %s went from %d to %d", Egress{Protocol: k.protocol, Allowed: k.allowed, Reason: k.reason}, what[i], b[i], a[i])
			}
			if lost[g] == nil {
				lost[g] = &sums{}
			}
			lost[g][i] += b[i] - a[i]
		}
	}
	for _, k := range keys {
		g := group(k)
		if lost[g] == nil {
			continue
		}
		var grew sums
		if a := after[g]; a != nil {
			grew = *a
		}
		if b := before[g]; b != nil {
			for i := range grew {
				grew[i] -= min(grew[i], b[i]) // b <= grew, checked above
			}
		}
		for i := range grew {
			if lost[g][i] > grew[i] {
				return fmt.Errorf("egress records of %s: %s went from %d to %d, and the folded record did not gain them",
					Egress{Host: k.host, Port: k.port, Protocol: k.protocol, Allowed: k.allowed, Reason: k.reason}, what[i], before[k][i], valueOr(after[k], i))
			}
		}
	}
	return nil
}

// sums are a key's connections, bytes sent and bytes received.
type sums [3]uint64

func valueOr(s *sums, i int) uint64 {
	if s == nil {
		return 0
	}
	return s[i]
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
