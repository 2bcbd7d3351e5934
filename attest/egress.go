package attest

import "time"

// Egress is what the supervisor's proxy saw of the agent's connections to
// one destination (run --network proxy): a single connection, or, beyond
// the proxy's bound on records, every further connection to the same host,
// port and outcome folded into one record (Connections > 1).
//
// The JSON form, its place in the statement and in checkpoints, and its
// verification are specified beside their code.
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
