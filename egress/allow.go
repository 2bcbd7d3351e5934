package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Allow is one --allow-net entry: HOST[:PORT]. Host is a DNS name
// (lower-cased, without a trailing dot, optionally "*." + name for any
// subdomain of name but not name itself), an IPv4 literal or an IPv6
// literal (written bracketed, "[2001:db8::1]:443", and held here without
// brackets in its canonical form); Port 0 means the web's ports, 80 and 443.
type Allow struct {
	Host string
	Port uint16
}

// maxName is the longest DNS name, in its text form without a trailing dot.
const maxName = 253

// ParseAllow parses HOST[:PORT] (see Allow). It refuses an empty value, a
// host that is neither a DNS name nor an IP literal (an IPv6 literal must
// be bracketed; a name whose last label is all digits, such as "127.1",
// is refused as an ambiguous address), a lone "*" or a "*" anywhere but
// the first label, an IP literal with a zone, and a port that is not a
// decimal number from 1 to 65535. Errors name the value and what is wrong.
func ParseAllow(s string) (Allow, error) {
	host, port, err := splitHostPort(s)
	if err != nil {
		return Allow{}, fmt.Errorf("allowed destination %q: %w", s, err)
	}
	a := Allow{Host: host, Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		if _, err := parseHost(rest); err != nil {
			return Allow{}, fmt.Errorf("allowed destination %q: %w", s, err)
		}
		if _, isIP := hostIP(rest); isIP {
			return Allow{}, fmt.Errorf("allowed destination %q: a wildcard \"*.\" goes before a DNS name, not an address", s)
		}
		a.Host = "*." + strings.ToLower(strings.TrimSuffix(rest, "."))
		return a, nil
	}
	if host == "*" {
		return Allow{}, fmt.Errorf("allowed destination %q: \"*\" would allow every host; name the hosts, or use the host's network", s)
	}
	h, err := parseHost(host)
	if err != nil {
		return Allow{}, fmt.Errorf("allowed destination %q: %w", s, err)
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		// It resolves to loopback, which the proxy refuses for a name,
		// and inside the agent's namespace it is the agent's own.
		return Allow{}, fmt.Errorf("allowed destination %q: localhost is the agent's own loopback; to reach a service of the host give its address, such as 127.0.0.1%s", s, portSuffix(port))
	}
	a.Host = h
	return a, nil
}

// portSuffix is ":PORT", or "" for 0.
func portSuffix(port uint16) string {
	if port == 0 {
		return ""
	}
	return ":" + strconv.Itoa(int(port))
}

// String returns the canonical text of a, as recorded: the host (an IPv6
// literal bracketed), then ":" and the port unless it is 0.
func (a Allow) String() string {
	h := a.Host
	if strings.IndexByte(h, ':') >= 0 {
		h = "[" + h + "]"
	}
	if a.Port == 0 {
		return h
	}
	return h + ":" + strconv.Itoa(int(a.Port))
}

// splitHostPort splits HOST[:PORT] (PORT optional, 0 when absent) and
// HOST:PORT where HOST may be a bracketed IPv6 literal. The host is
// returned without brackets, not yet checked.
func splitHostPort(s string) (string, uint16, error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty; want HOST or HOST:PORT")
	}
	host, portText, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, fmt.Errorf("no closing \"]\" after the IPv6 address")
		}
		host = s[1:end]
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portText, hasPort = rest[1:], true
		default:
			return "", 0, fmt.Errorf("want \":PORT\" after \"]\"")
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
			return "", 0, fmt.Errorf("%q between brackets is not an IPv6 address (without a zone)", host)
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.IndexByte(s[:i], ':') >= 0 {
			return "", 0, fmt.Errorf("an IPv6 address goes between brackets, as [2001:db8::1]:443")
		}
		host, portText, hasPort = s[:i], s[i+1:], true
	}
	var port uint16
	if hasPort {
		p, err := parsePort(portText)
		if err != nil {
			return "", 0, err
		}
		port = p
	}
	if host == "" {
		return "", 0, fmt.Errorf("no host")
	}
	return host, port, nil
}

// parsePort parses a decimal port from 1 to 65535, digits only.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" || (s[0] == '0') {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q: want a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// parseHost checks a host (no brackets, no port) and returns its
// canonical form: an IP literal as netip prints it (an IPv4-mapped IPv6
// literal stays IPv6), a DNS name lower-cased without a trailing dot.
func parseHost(h string) (string, error) {
	if a, isIP := hostIP(h); isIP {
		if !a.IsValid() || a.Zone() != "" {
			return "", fmt.Errorf("%q is not an IP address (without a zone)", h)
		}
		return a.String(), nil
	}
	name := strings.ToLower(strings.TrimSuffix(h, "."))
	if err := checkName(name); err != nil {
		return "", err
	}
	return name, nil
}

// hostIP reports whether h is written as an IP literal (it contains a
// colon, or it parses as IPv4), and the address (invalid when h looks
// like an IPv6 literal but does not parse).
func hostIP(h string) (netip.Addr, bool) {
	if strings.IndexByte(h, ':') >= 0 {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return netip.Addr{}, true
		}
		return a, true
	}
	a, err := netip.ParseAddr(h)
	if err == nil && a.Is4() {
		return a, true
	}
	return netip.Addr{}, false
}

// checkName checks a lower-cased DNS name without a trailing dot: at most
// 253 bytes, labels of 1 to 63 letters, digits, hyphens and underscores
// that neither start nor end with a hyphen, and a last label that is not
// all digits (so that "127.1" or "2130706433" is never taken for a name
// a resolver would read as an address).
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if len(name) > maxName {
		return fmt.Errorf("host name of %d bytes: at most %d", len(name), maxName)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" {
			return fmt.Errorf("host name %q has an empty label", name)
		}
		if len(l) > 63 {
			return fmt.Errorf("host name %q has a label longer than 63 bytes", name)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host name %q has a label that starts or ends with \"-\"", name)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name %q: byte %q is not a letter, digit, \"-\" or \"_\"", name, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return fmt.Errorf("host name %q ends in a number: write an IPv4 address in full, as 127.0.0.1", name)
	}
	return nil
}

// allows reports whether a permits host (canonical, as parseHost returns
// it) and port.
func (a Allow) allows(host string, port uint16) bool {
	if !a.allowsPort(port) {
		return false
	}
	if rest, ok := strings.CutPrefix(a.Host, "*."); ok {
		return strings.HasSuffix(host, "."+rest)
	}
	return a.Host == host
}

func (a Allow) allowsPort(port uint16) bool {
	if a.Port == 0 {
		return port == 80 || port == 443
	}
	return a.Port == port
}
