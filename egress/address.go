package egress

import "net/netip"

// special is one address range the proxy refuses unless the literal address
// and port were allowed, with the word a refusal gives for it.
type special struct {
	prefix netip.Prefix
	kind   string
}

// specialRanges returns the ranges of addresses that do not lead to the
// public internet: this host, the local networks, the cloud metadata
// service (169.254.169.254, inside link-local), and addresses no
// connection should go to. An IPv4-mapped IPv6 address is checked as its
// IPv4 address; a NAT64 address (64:ff9b::/96) as the IPv4 address it
// embeds.
func specialRanges() []special {
	p := netip.MustParsePrefix
	return []special{
		{p("0.0.0.0/8"), "unspecified"},
		{p("10.0.0.0/8"), "private"},
		{p("100.64.0.0/10"), "shared (carrier-grade NAT)"},
		{p("127.0.0.0/8"), "loopback"},
		{p("169.254.0.0/16"), "link-local"},
		{p("172.16.0.0/12"), "private"},
		{p("192.0.0.0/24"), "reserved"},
		{p("192.168.0.0/16"), "private"},
		{p("198.18.0.0/15"), "reserved"},
		{p("224.0.0.0/4"), "multicast"},
		{p("240.0.0.0/4"), "reserved (broadcast)"},
		{p("::/128"), "unspecified"},
		{p("::1/128"), "loopback"},
		{p("::/96"), "reserved"}, // IPv4-compatible, deprecated
		{p("100::/64"), "reserved"},
		{p("fc00::/7"), "unique-local"},
		{p("fe80::/10"), "link-local"},
		{p("fec0::/10"), "site-local"},
		{p("ff00::/8"), "multicast"},
	}
}

var specials = specialRanges()

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// addressKind returns the word for the range a lies in ("loopback",
// "private", ...), or "" when a is a public address.
func addressKind(a netip.Addr) string {
	a = a.WithZone("").Unmap()
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, s := range specials {
		if s.prefix.Contains(a) {
			return s.kind
		}
	}
	return ""
}
