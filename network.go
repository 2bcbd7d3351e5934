package layerseal

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/nsrun"
)

// Networks are the agent's networks a session offers (nsrun.Sandbox.Network):
//
//   - "none" (the default of the CLI): a network namespace of its own with
//     only loopback; nothing of the host's network is reachable, its
//     loopback services included.
//   - "proxy": the same, plus a proxy the supervisor serves outside the
//     namespace, reached at 127.0.0.1:nsrun.ProxyPort inside it, that
//     connects only to RunConfig.AllowNet (see package egress) and records
//     every connection: the statement and each checkpoint carry the
//     records (attest.Egress), the launch record the allow list.
//   - "host": the host's network, loopback services included; recorded,
//     and the CLI warns.
const (
	NetworkNone  = "none"
	NetworkProxy = "proxy"
	NetworkHost  = "host"
)

// proxyEnvNames are the environment variables a session sets for an agent
// on the proxied network, unless the process sets them: HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY (socks5h://, so that names are resolved by the
// proxy), NO_PROXY (loopback) and their lower-case forms.
func proxyEnvNames() []string {
	return []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy"}
}

// proxyEnv returns env with the proxy variables for a proxy at
// 127.0.0.1:port added, each unless env sets it already. NO_PROXY names
// the agent's own loopback (its servers are its own), but for an address
// family whose loopback the allow list names: an allowed 127.0.0.1:8080
// is the host's, reached only through the proxy.
func proxyEnv(env []string, port int, allow []egress.Allow) []string {
	addr := "127.0.0.1:" + strconv.Itoa(port)
	vals := map[string]string{
		"HTTP_PROXY": "http://" + addr, "HTTPS_PROXY": "http://" + addr,
		"ALL_PROXY": "socks5h://" + addr, "NO_PROXY": noProxy(allow),
	}
	out := append([]string(nil), env...)
	for _, name := range proxyEnvNames() {
		if envHas(env, name) {
			continue
		}
		out = append(out, name+"="+vals[strings.ToUpper(name)])
	}
	return out
}

// noProxy is NO_PROXY for the allow list: the loopback names and
// addresses, less those of a family whose loopback is allowed.
func noProxy(allow []egress.Allow) string {
	v4, v6 := true, true
	for _, a := range allow {
		if ip, err := netip.ParseAddr(a.Host); err == nil && ip.IsLoopback() {
			v4, v6 = v4 && !ip.Is4(), v6 && !ip.Is6()
		}
	}
	var out []string
	if v4 {
		out = append(out, "localhost", "127.0.0.1")
	}
	if v6 {
		out = append(out, "::1")
	}
	return strings.Join(out, ",")
}

func envHas(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// checkNetwork checks the network settings of cfg before anything starts
// and gives an agent on the proxied network its proxy variables.
func checkNetwork(cfg *RunConfig) error {
	if len(cfg.AllowNet) > 0 && cfg.Sandbox.Network != NetworkProxy {
		return fmt.Errorf("allowed destinations (%s) need network %q, not %q", allowText(cfg.AllowNet), NetworkProxy, orNone(cfg.Sandbox.Network))
	}
	for _, a := range cfg.AllowNet {
		if b, err := egress.ParseAllow(a.String()); err != nil || b != a {
			return fmt.Errorf("allowed destination %q is not in its canonical form", a.String())
		}
	}
	if cfg.Sandbox.Network != NetworkProxy {
		return nil
	}
	if cfg.Process.Env == nil {
		cfg.Process.Env = nsrun.DefaultEnv(cfg.Process.User.UID, os.Getenv("TERM"))
	}
	cfg.Process.Env = proxyEnv(cfg.Process.Env, nsrun.ProxyPort, cfg.AllowNet)
	return nil
}

// orNone is network with "" spelled as what it means, NetworkNone.
func orNone(network string) string {
	if network == "" {
		return NetworkNone
	}
	return network
}

func allowText(as []egress.Allow) string {
	var s []string
	for _, a := range as {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

// allowList is the launch record's allow_net: sorted and unique.
func allowList(as []egress.Allow) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range as {
		if s := a.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// egressProxy is a session's proxy while the agent runs.
type egressProxy struct {
	p      *egress.Proxy
	served chan error
	once   sync.Once
}

// close stops the proxy, once: it ends every open connection (each is
// recorded) and waits for the proxy's goroutines.
func (e *egressProxy) close(log func(string, ...any)) {
	e.once.Do(func() {
		e.p.Close()
		if err := <-e.served; err != nil && !errors.Is(err, net.ErrClosed) {
			log("egress proxy: %v", err)
		}
	})
}

// startNetwork starts the session's proxy, on the proxied network, before
// the agent starts: on the listener the agent reaches inside its
// namespace, refusals logged as they happen; and records the allow list
// in the sandbox the launch record holds.
func (s *session) startNetwork(r *nsrun.Run, ready *nsrun.Ready) error {
	if s.cfg.Sandbox.Network != NetworkProxy {
		return nil
	}
	ready.Sandbox.AllowNet = allowList(s.cfg.AllowNet)
	l := r.ProxyListener()
	if l == nil {
		return errors.New("the agent's network namespace has no proxy listener")
	}
	var refusals atomic.Int64
	p, err := egress.New(egress.Config{
		Allow:      s.cfg.AllowNet,
		MaxRecords: egressMaxRecords,
		Refused: func(e attest.Egress) {
			// A flood of refusals is said once, not line by line: the
			// statement holds every one.
			switch n := refusals.Add(1); {
			case n > refusalLines+1:
				return
			case n == refusalLines+1:
				s.log("egress refused: more connections than the %d above, not shown here: the statement lists every one (`layerseal show`)", refusalLines)
				return
			}
			what := e.Host
			if what != "" {
				what = hostPortText(e.Host, e.Port)
			} else {
				what = "a connection"
			}
			s.log("egress refused: %s (%s)", what, e.Reason)
		},
	})
	if err != nil {
		l.Close()
		return fmt.Errorf("egress proxy: %w", err)
	}
	s.egress = &egressProxy{p: p, served: make(chan error, 1)}
	go func() { s.egress.served <- p.Serve(l) }()
	return nil
}

// endNetwork closes the proxy, if the session started one.
func (s *session) endNetwork() {
	if s.egress != nil {
		s.egress.close(s.log)
	}
}

// refusalLines is how many of the proxy's refusals a run prints, one line
// each, before it says only that there are more.
const refusalLines = 20

// egressMaxRecords bounds the records kept one per connection; folded
// records (at most as many again, and one per protocol and outcome) keep
// a statement's records under attest.MaxEgressRecords.
const egressMaxRecords = 2048

// egressRecords is what the proxy saw so far, as a statement or
// checkpoint holds it; nil without a proxy.
func (s *session) egressRecords() []attest.Egress {
	if s.egress == nil {
		return nil
	}
	return attest.SortEgress(s.egress.p.Records())
}

// stopEgress closes the proxy once the agent is gone and returns its
// records.
func (s *session) stopEgress() []attest.Egress {
	if s.egress == nil {
		return nil
	}
	s.egress.close(s.log)
	return s.egressRecords()
}

func hostPortText(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
