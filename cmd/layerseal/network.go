package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/layerseal/layerseal"
	"github.com/layerseal/layerseal/attest"
	"github.com/layerseal/layerseal/egress"
	"github.com/layerseal/layerseal/policy"
)

// hostNetworkWarning is what run and show say of --network host.
const hostNetworkWarning = "warning: --network host: the agent could reach the host's network and its loopback services (databases, metadata endpoints, other agents' ports); --network none (the default) or --allow-net HOST[:PORT] keep it off"

// runNetwork reads --network, --allow-net and the config's network:
// allow list: the agent's network and the destinations its proxy allows.
// An --allow-net value that ParseAllow refuses, or an allow list with
// --network none or host, is a usage error naming them.
func runNetwork(cmd *cli.Command, c *policy.Config) (string, []egress.Allow, error) {
	var allow []egress.Allow
	from := []string{}
	if c != nil && len(c.AllowNet) > 0 {
		allow = append(allow, c.AllowNet...)
		from = append(from, "network: allow in the config")
	}
	for _, v := range cmd.StringSlice("allow-net") {
		a, err := egress.ParseAllow(v)
		if err != nil {
			return "", nil, usageErr("run: --allow-net: %v", err)
		}
		allow = append(allow, a)
	}
	if len(cmd.StringSlice("allow-net")) > 0 {
		from = append(from, "--allow-net "+strings.Join(cmd.StringSlice("allow-net"), " --allow-net "))
	}
	network := cmd.String("network")
	if len(allow) > 0 {
		if cmd.IsSet("network") && network != layerseal.NetworkProxy {
			return "", nil, usageErr("run: --network %s with %s: allowed destinations are reached through the proxy; give --network proxy, or leave --network out", network, strings.Join(from, " and "))
		}
		network = layerseal.NetworkProxy
	}
	return network, allow, nil
}

// writeEgress prints a statement's egress records as a table, one line
// after prefix per record: destination, protocol, outcome, bytes each way
// and connections.
func writeEgress(w io.Writer, prefix string, es []attest.Egress) {
	if len(es) == 0 {
		return
	}
	fmt.Fprintf(w, "%segress: %d record(s) of the agent's connections through the proxy:\n", prefix, len(es))
	fmt.Fprintf(w, "%s  %-32s %-8s %-9s %10s %10s %5s  %s\n", prefix, "DESTINATION", "PROTOCOL", "OUTCOME", "SENT", "RECEIVED", "CONNS", "REASON")
	for _, e := range es {
		dest := "(any)"
		if e.Host != "" {
			dest = printable(hostPort(e.Host, e.Port))
		}
		outcome := "allowed"
		if !e.Allowed {
			outcome = "refused"
		}
		line := fmt.Sprintf("%s  %-32s %-8s %-9s %10d %10d %5d  %s", prefix, dest, orDefault(e.Protocol, "-"), outcome,
			e.Sent, e.Received, e.Connections, printable(e.Reason))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

func hostPort(host string, port uint16) string {
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// egressJSON is show --json's egress member: the records as the
// statement holds them, numbers as numbers.
func egressJSON(es []attest.Egress) []map[string]any {
	out := []map[string]any{}
	for _, e := range es {
		out = append(out, map[string]any{"host": e.Host, "port": e.Port, "protocol": e.Protocol, "address": e.Address,
			"allowed": e.Allowed, "reason": e.Reason, "sent": e.Sent, "received": e.Received,
			"first": e.First, "last": e.Last, "connections": e.Connections})
	}
	return out
}

// launchBeside reads the launch record beside a statement, unverified,
// for what show says of its sandbox; nil when there is none.
func launchBeside(path string) *attest.LaunchRecord {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	env, err := os.ReadFile(filepath.Join(path, layerseal.LaunchFile))
	if err != nil {
		return nil
	}
	l, err := attest.ReadLaunch(env)
	if err != nil {
		return nil
	}
	return l
}
