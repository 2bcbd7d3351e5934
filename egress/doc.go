// Package egress is the proxy through which an agent in its own network
// namespace reaches the network (run --network proxy): it connects the
// agent only to the destinations the operator allowed, and records every
// connection for the signed statement.
//
// For most uses: parse each --allow-net value with ParseAllow, build a
// Proxy with New, call Serve with the listener the agent reaches, take
// Records for the statement, and Close at the end of the run.
//
// # What the proxy accepts
//
// One listener serves three ways of asking, told apart by the first byte:
//
//   - SOCKS5 (RFC 1928; the first byte is 5), without authentication,
//     command CONNECT only, with an IPv4, IPv6 or domain-name address;
//   - HTTP CONNECT HOST:PORT, which becomes a tunnel after
//     "HTTP/1.1 200 Connection established";
//   - a plain HTTP request with an absolute http:// URI ("GET
//     http://host/path HTTP/1.1"). One request per connection: the proxy
//     removes the hop-by-hop headers (Connection and the headers it names,
//     Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade) and every
//     Proxy-* header, asks the destination to close after its response
//     (Connection: close), relays the response as it comes, and closes.
//
// # What it refuses, and why
//
// The agent's own name resolution is never used (in its namespace it has
// none): the proxy resolves a name itself, with Config.Resolve. It refuses
//
//   - a host that no Allow names, or a port that no Allow names for that
//     host (an Allow without a port names 80 and 443);
//   - a name that does not resolve;
//   - a destination any of whose addresses lies in a range that does not
//     lead to the public internet, unless that literal address and port
//     were allowed (--allow-net 127.0.0.1:8080): loopback (127/8, ::1),
//     private (10/8, 172.16/12, 192.168/16), shared carrier-grade NAT
//     (100.64/10), link-local (169.254/16, with the cloud metadata service
//     169.254.169.254, and fe80::/10), unique-local (fc00::/7), site-local
//     (fec0::/10), multicast (224/4, ff00::/8), unspecified (0/8, ::),
//     reserved and broadcast (192.0.0/24, 198.18/15, 240/4, ::/96,
//     100::/64). An IPv4-mapped IPv6 address is checked as its IPv4
//     address, a NAT64 address (64:ff9b::/96) as the IPv4 address it
//     embeds. So an allowed name that resolves to a private address is
//     refused: DNS rebinding gains nothing.
//
// Every address a name resolves to is checked before any is tried, and
// the proxy connects to a checked address itself (at most 8 of them, in
// order), so no second lookup can change the answer between check and
// connection.
//
// A refusal says why: over HTTP, a status (403 for what is not allowed,
// 400 for a malformed request or host name, 431 for a request too large,
// 408 for one too slow, 502 or 504 when the destination did not answer,
// 503 while the proxy closes) with a text/plain body naming the
// destination and the reason; over SOCKS5, the reply code (2, not allowed
// by the ruleset; 4, host unreachable, for a name that did not resolve or
// is malformed; 3, 5 and 6 for a network unreachable, a connection refused
// and one timed out; 7, command not supported, for BIND and UDP
// ASSOCIATE; 8, address type not supported; 1 for anything else; method
// 255 when "no authentication" is not offered). Config.Refused, when set,
// hears of each refusal too.
//
// # Bounds
//
// Nothing the agent sends can make the proxy hold more than a bounded
// amount: a request (HTTP request line and headers, or the SOCKS5
// greeting and request) is at most 64 KiB and must arrive within
// Config.HeaderTimeout (10 s by default) of the connection; a refusal is
// written within 2 s or abandoned; resolving and connecting take at most
// Config.DialTimeout (10 s). At most Config.MaxConns connections (256) are
// handled at once; one beyond is closed as soon as it is accepted and
// recorded with the reason "too many connections". Tunnels have no idle
// timeout: they last until either side closes, or Close.
//
// Relaying copies between the two TCP connections with splice(2), in
// chunks of 1 MiB, so the data does not pass through the proxy's memory.
//
// # What it records
//
// Each connection becomes one attest.Egress record: the host as asked
// (lower-cased; empty when the request never named a valid one, so no
// byte the agent chose reaches the record unchecked), the port, the
// protocol ("connect", "http", "socks5", or empty when the connection was
// refused before a request was read), the address connected to (or the
// first refused one), whether it was allowed and the Reason* constant
// saying why not, the bytes relayed each way, the time it was accepted and
// the time it ended. The first Config.MaxRecords connections (1024) keep
// their own record; later ones fold into one record per host, port,
// protocol, outcome and reason (Connections counts them, bytes and times
// add up, the address is the first one's); beyond MaxRecords such folded
// records, into one per protocol, outcome and reason with an empty host,
// port 0 and no address. Memory and records are thus bounded whatever the
// agent does.
package egress
