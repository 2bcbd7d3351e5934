package egress

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestParseAllow(t *testing.T) {
	good := []struct {
		in, canon string
		host      string
		port      uint16
	}{
		{"example.com", "example.com", "example.com", 0},
		{"Example.COM.:8443", "example.com:8443", "example.com", 8443},
		{"*.github.com", "*.github.com", "*.github.com", 0},
		{"*.GitHub.com:22", "*.github.com:22", "*.github.com", 22},
		{"127.0.0.1:8080", "127.0.0.1:8080", "127.0.0.1", 8080},
		{"[::1]:8080", "[::1]:8080", "::1", 8080},
		{"[2001:DB8:0::1]", "[2001:db8::1]", "2001:db8::1", 0},
		{"[::ffff:127.0.0.1]:80", "[::ffff:127.0.0.1]:80", "::ffff:127.0.0.1", 80},
		{"_acme.x-y.example:65535", "_acme.x-y.example:65535", "_acme.x-y.example", 65535},
		{"1a.example", "1a.example", "1a.example", 0},
	}
	for _, g := range good {
		a, err := ParseAllow(g.in)
		if err != nil {
			t.Errorf("ParseAllow(%q): %v", g.in, err)
			continue
		}
		if a.Host != g.host || a.Port != g.port || a.String() != g.canon {
			t.Errorf("ParseAllow(%q) = %+v (%q), want host %q port %d (%q)", g.in, a, a.String(), g.host, g.port, g.canon)
		}
		if b, err := ParseAllow(a.String()); err != nil || b != a {
			t.Errorf("ParseAllow(%q) = %+v, %v: not a round trip of %+v", a.String(), b, err, a)
		}
	}
	bad := []struct{ in, want string }{
		{"", "empty"},
		{":443", "no host"},
		{"example.com:", "port \"\""},
		{"example.com:0", "port \"0\""},
		{"example.com:65536", "port \"65536\""},
		{"example.com:08", "port \"08\""},
		{"example.com:+80", "port \"+80\""},
		{"example.com:http", "port \"http\""},
		{"::1", "between brackets"},
		{"[::1", "closing"},
		{"[::1]x", "after \"]\""},
		{"[127.0.0.1]:80", "not an IPv6 address"},
		{"[fe80::1%eth0]:80", "not an IPv6 address"},
		{"localhost:8080", "give its address, such as 127.0.0.1:8080"},
		{"db.localhost", "the agent's own loopback"},
		{"*", "every host"},
		{"*:443", "every host"},
		{"a.*.example", "is not a letter"},
		{"*.127.0.0.1", "wildcard"},
		{"127.1", "ends in a number"},
		{"2130706433", "ends in a number"},
		{"01.2.3.4", "ends in a number"},
		{"exa mple.com", "is not a letter"},
		{"exa\x00mple.com", "is not a letter"},
		{"ex\nample.com", "is not a letter"},
		{"-example.com", "starts or ends"},
		{"example..com", "empty label"},
		{".example.com", "empty label"},
		{strings.Repeat("a", 64) + ".com", "longer than 63"},
		{strings.Repeat("abcdefghi.", 26) + "com", "at most 253"},
		{"bücher.example", "is not a letter"},
		{"example.com:443:443", "between brackets"},
		{"user@example.com", "is not a letter"},
	}
	for _, b := range bad {
		a, err := ParseAllow(b.in)
		if err == nil {
			t.Errorf("ParseAllow(%q) = %+v, want an error", b.in, a)
			continue
		}
		if !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), strconv.Quote(b.in)) {
			t.Errorf("ParseAllow(%q): %v; want it to name the value and say %q", b.in, err, b.want)
		}
	}
}

func TestAllowMatches(t *testing.T) {
	cases := []struct {
		allow, host string
		port        uint16
		want        bool
	}{
		{"example.com", "example.com", 443, true},
		{"example.com", "example.com", 80, true},
		{"example.com", "example.com", 8080, false},
		{"example.com", "www.example.com", 443, false},
		{"example.com:22", "example.com", 22, true},
		{"example.com:22", "example.com", 443, false},
		{"*.example.com", "www.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 443, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "badexample.com", 443, false},
		{"127.0.0.1:8080", "127.0.0.1", 8080, true},
		{"127.0.0.1:8080", "127.0.0.2", 8080, false},
		{"[::1]:8080", "::1", 8080, true},
	}
	for _, c := range cases {
		a, err := ParseAllow(c.allow)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.allows(c.host, c.port); got != c.want {
			t.Errorf("%s allows %s port %d = %v, want %v", c.allow, c.host, c.port, got, c.want)
		}
	}
}

func TestAddressKind(t *testing.T) {
	cases := map[string]string{
		"0.0.0.0":                "unspecified",
		"0.1.2.3":                "unspecified",
		"10.1.2.3":               "private",
		"100.64.0.1":             "shared (carrier-grade NAT)",
		"100.128.0.1":            "",
		"127.0.0.1":              "loopback",
		"127.255.255.254":        "loopback",
		"169.254.169.254":        "link-local",
		"172.16.0.1":             "private",
		"172.31.255.255":         "private",
		"172.32.0.1":             "",
		"192.168.1.1":            "private",
		"224.0.0.1":              "multicast",
		"239.255.255.250":        "multicast",
		"255.255.255.255":        "reserved (broadcast)",
		"8.8.8.8":                "",
		"93.184.216.34":          "",
		"::":                     "unspecified",
		"::1":                    "loopback",
		"::127.0.0.1":            "reserved",
		"::ffff:127.0.0.1":       "loopback",
		"::ffff:169.254.169.254": "link-local",
		"::ffff:10.0.0.1":        "private",
		"::ffff:8.8.8.8":         "",
		"64:ff9b::7f00:1":        "loopback",
		"64:ff9b::808:808":       "",
		"fc00::1":                "unique-local",
		"fd12:3456::1":           "unique-local",
		"fe80::1":                "link-local",
		"fe80::1%eth0":           "link-local",
		"fec0::1":                "site-local",
		"ff02::1":                "multicast",
		"2001:4860:4860::8888":   "",
	}
	for in, want := range cases {
		if got := addressKind(netip.MustParseAddr(in)); got != want {
			t.Errorf("addressKind(%s) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseAllow(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "[::1]:80", "127.0.0.1:8080", "a..b", "[fe80::1%x]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllow(s)
		if err != nil {
			return
		}
		b, err := ParseAllow(a.String())
		if err != nil || b != a {
			t.Fatalf("ParseAllow(%q) = %+v, but its text %q parses to %+v, %v", s, a, a.String(), b, err)
		}
		for i := 0; i < len(a.Host); i++ {
			if c := a.Host[i]; c <= ' ' || c >= 0x7f || 'A' <= c && c <= 'Z' {
				t.Fatalf("ParseAllow(%q): host %q holds byte %q", s, a.Host, c)
			}
		}
	})
}
